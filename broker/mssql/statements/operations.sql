-- The T-SQL `sbworker status` and `sbworker dead-letter` send (crates/core/src/ops/), one per
-- "-- name:" section, each one batch. Parameters are @P1, @P2, ... as tiberius binds
-- them. The procedures are in 06_operations.sql; times travel as ISO 8601 text.

-- @P1 minutes counted as recent (retries), @P2 minutes after which a key is stale.
-- name: status_report
EXEC sbworker.status_report @recent_minutes = @P1, @stale_minutes = @P2

-- @P1 diverted at or after (NULL: any time), @P2 at most this many.
-- name: dead_letters
EXEC sbworker.dead_letters @since = @P1, @limit = @P2

-- @P1 the id.
-- name: dead_letter
EXEC sbworker.dead_letter_show @id = @P1

-- @P1 the id, @P2 who replays, @P3 leave an entry replayed already alone (NULL back).
-- name: replay
EXEC sbworker.replay_dead_letter @id = @P1, @by = @P2, @unless_replayed = @P3

-- @P1 diverted before, @P2 batch size; one row: how many were deleted.
-- name: purge
EXEC sbworker.purge_dead_letters @before = @P1, @batch = @P2

-- A page of dead letters: @P1 queue, @P2 text in the reason, @P3 replayed (each NULL:
-- any), @P4 no id above (NULL: none), @P5 at most this many, @P6 this letter only (NULL:
-- any).
-- name: dead_letter_page
EXEC sbworker.dead_letter_page @queue = @P1, @reason = @P2, @replayed = @P3, @upto = @P4, @limit = @P5, @id = @P6

-- How many the filter picks, the highest id and the ids' sum: @P1..@P4 as
-- dead_letter_page, @P5 as its @P6.
-- name: dead_letter_count
EXEC sbworker.dead_letter_count @queue = @P1, @reason = @P2, @replayed = @P3, @upto = @P4, @id = @P5

-- The confirmed set deleted: @P1..@P4 as dead_letter_page, @P5 the count confirmed,
-- @P6 the filter as shown (for the action log), @P7 this letter only, @P8 the sum of the
-- ids confirmed; one row: how many.
-- name: purge_matching
EXEC sbworker.purge_dead_letters_matching @queue = @P1, @reason = @P2, @replayed = @P3, @upto = @P4, @expected = @P5, @detail = @P6, @id = @P7, @expected_sum = @P8

-- @P1 the action, @P2 what it acted on, @P3 how many letters.
-- name: note_action
EXEC sbworker.note_action @action = @P1, @detail = @P2, @letters = @P3

-- @P1 at most this many.
-- name: actions
EXEC sbworker.actions @limit = @P1

-- @P1 minutes back from now.
-- name: rates
EXEC sbworker.rates @minutes = @P1
