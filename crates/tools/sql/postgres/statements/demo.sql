-- The statements of `sbworker demo` (crates/tools/src/demo/): a roster loaded in bulk, a planner's
-- edits, and the checks at the end. Parameters are $1, $2, ... as in the Rust calls.

-- name: cao
INSERT INTO rooster.cao (id, code, is_vier_weken, naam, werkweek_uren) VALUES
    (100, 'ZKH', false, 'CAO Ziekenhuizen', 36),
    (200, 'GGZ', false, 'CAO GGZ', 36)
ON CONFLICT (id) DO NOTHING;

-- name: periode
INSERT INTO rooster.periode (id, is_vier_weken, begin_datum, eind_datum)
VALUES ($1, false, $2::text::date, $3::text::date) ON CONFLICT (id) DO NOTHING;

-- name: dienst_types
INSERT INTO rooster.dienst_type (code, omschrijving, telt_mee_in_gewerkte_uren) VALUES
    ('D', 'dagdienst', true), ('L', 'late dienst', true), ('N', 'nachtdienst', true),
    ('OPL', 'opleiding', true), ('BER', 'bereikbaarheid', false), ('VAK', 'vakantie', false)
ON CONFLICT (code) DO NOTHING;

-- name: dienstverbanden
INSERT INTO rooster.dienstverband (id, cao_id, dagen_per_week, datum_in_dienst, parttime_uren, salaris,
                                   garantie_toeslag, loon_toeslag, soort, functiegroep)
SELECT * FROM unnest($1::int[], $2::int[], $3::text[]::numeric[], $4::text[]::date[], $5::text[]::numeric[],
                     $6::text[]::numeric[], $7::text[]::numeric[], $8::text[]::numeric[], $9::text[], $10::int[]);

-- One Dienst per (dienstverband, date).
-- name: diensten
INSERT INTO rooster.dienst (dienstverband_id, datum)
SELECT * FROM unnest($1::int[], $2::text[]::date[]);

-- name: tijdblokken
INSERT INTO rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type, is_ziek, verlof)
SELECT d.id, u.b, u.e, u.t, u.z, u.l
  FROM unnest($1::int[], $2::text[]::date[], $3::text[]::time[], $4::text[]::time[], $5::text[], $6::bool[],
              $7::text[])
       AS u(dv, datum, b, e, t, z, l)
  JOIN rooster.dienst d ON d.dienstverband_id = u.dv AND d.datum = u.datum;

-- After the bulk load, inside its transaction (ANALYZE counts the transaction's own
-- new rows): statistics for the commit-time triggers and the planners' statements, as
-- a bulk import should leave them. Without them the planners' prepared edits ran with
-- plans for empty tables (hash joins over every block, about 20 ms an edit).
-- name: analyze_roster
ANALYZE rooster.dienstverband, rooster.dienst, rooster.tijdblok, rooster.dienst_type, rooster.periode, rooster.cao;

-- A planner moves the end of one of the employee's blocks ($2 picks which, $3 minutes).
-- name: edit_shift_end
UPDATE rooster.tijdblok SET eind_tijd = eind_tijd + make_interval(mins => $3)
 WHERE id = (SELECT t.id FROM rooster.tijdblok t JOIN rooster.dienst d ON d.id = t.dienst_id
              WHERE d.dienstverband_id = $1 ORDER BY t.id
             OFFSET $2::int % greatest(1, (SELECT count(*) FROM rooster.tijdblok t JOIN rooster.dienst d ON d.id = t.dienst_id
                                        WHERE d.dienstverband_id = $1)) LIMIT 1);

-- A block turns sick, or back (a leave block never: leave is not sick).
-- name: toggle_sick
UPDATE rooster.tijdblok SET is_ziek = NOT is_ziek
 WHERE id = (SELECT t.id FROM rooster.tijdblok t JOIN rooster.dienst d ON d.id = t.dienst_id
              WHERE d.dienstverband_id = $1 AND t.verlof IS NULL ORDER BY t.id
             OFFSET $2::int % greatest(1, (SELECT count(*) FROM rooster.tijdblok t JOIN rooster.dienst d ON d.id = t.dienst_id
                                        WHERE d.dienstverband_id = $1 AND t.verlof IS NULL)) LIMIT 1);

-- A shift on a free day ($2 date, $3 begin, $4 end, $5 duty type).
-- name: add_shift
WITH d AS (
    INSERT INTO rooster.dienst (dienstverband_id, datum)
    SELECT $1, $2::text::date
     WHERE NOT EXISTS (SELECT 1 FROM rooster.dienst WHERE dienstverband_id = $1 AND datum = $2::text::date)
    RETURNING id
)
INSERT INTO rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type)
SELECT id, $3::text::time, $4::text::time, $5 FROM d;

-- A shift taken off the roster ($2 picks which).
-- name: remove_shift
DELETE FROM rooster.dienst
 WHERE id = (SELECT id FROM rooster.dienst WHERE dienstverband_id = $1 ORDER BY datum, id
             OFFSET $2::int % greatest(1, (SELECT count(*) FROM rooster.dienst WHERE dienstverband_id = $1)) LIMIT 1);

-- Progress: requests sent, answered (any outcome), faults, messages waiting.
-- name: progress
SELECT count(*), count(uitkomst), count(*) FILTER (WHERE uitkomst = 'fout'),
       (SELECT count(*) FROM sb.message), (SELECT count(*) FROM sb.endpoint)
  FROM rekenserver.berekening_log;

-- name: outcomes
SELECT count(*),
       count(*) FILTER (WHERE uitkomst = 'opgeslagen'),
       count(*) FILTER (WHERE uitkomst IN ('vervangen', 'verouderd')),
       count(*) FILTER (WHERE uitkomst = 'fout'),
       coalesce(extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY beantwoord_op - verzonden_op)) * 1000, 0)::float8,
       coalesce(extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY beantwoord_op - verzonden_op)) * 1000, 0)::float8
  FROM rekenserver.berekening_log
 WHERE verzonden_op >= $1::text::timestamptz;

-- Every key, its roster version, what is stored and how the last request ended.
-- name: keys
SELECT s.dienstverband_id, s.periode_id, s.versie, r.versie,
       (SELECT l.uitkomst FROM rekenserver.berekening_log l
         WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
         ORDER BY l.versie DESC, l.verzonden_op DESC LIMIT 1),
       (SELECT l.foutmelding FROM rekenserver.berekening_log l
         WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
         ORDER BY l.versie DESC, l.verzonden_op DESC LIMIT 1)
  FROM rekenserver.sleutel s
  LEFT JOIN rekenserver.resultaat r USING (dienstverband_id, periode_id)
 ORDER BY 1, 2;

-- The Vraag of a key as its roster stands now (to recompute and compare).
-- name: vraag_now
SELECT rekenserver.vraag($1, $2, $3, gen_random_uuid())::text;

-- name: factors
SELECT loonfactor_code, waarde::text FROM rekenserver.resultaat_factor
 WHERE dienstverband_id = $1 AND periode_id = $2 ORDER BY loonfactor_code;

-- Versions stored out of order (must be none).
-- name: backwards
SELECT count(*) FROM (
    SELECT versie, lag(versie) OVER (PARTITION BY dienstverband_id, periode_id ORDER BY id) AS vorige
      FROM rekenserver.resultaat_historie) h
 WHERE vorige >= versie;

-- A few employees' results for the table at the end.
-- name: sample
SELECT dv.id, dv.soort, coalesce(nullif(dv.parttime_uren, 0), 36)::text, r.versie,
       coalesce(sum(f.waarde) FILTER (WHERE f.loonfactor_code = '100'), 0)::text,
       coalesce(sum(f.waarde) FILTER (WHERE f.loonfactor_code BETWEEN '210' AND '214'), 0)::text,
       coalesce(sum(f.waarde) FILTER (WHERE f.loonfactor_code = '230'), 0)::text,
       coalesce(sum(f.waarde) FILTER (WHERE f.loonfactor_code = '120'), 0)::text,
       coalesce(sum(f.waarde) FILTER (WHERE f.loonfactor_code = '101'), 0)::text
  FROM rooster.dienstverband dv
  JOIN rekenserver.resultaat r ON r.dienstverband_id = dv.id
  LEFT JOIN rekenserver.resultaat_factor f USING (dienstverband_id, periode_id)
 WHERE dv.id = ANY ($1)
 GROUP BY dv.id, dv.soort, dv.parttime_uren, r.versie
 ORDER BY dv.id;

-- The server's clock (the demo's log of phases).
-- name: server_clock
SELECT clock_timestamp()::text;

-- How many employments the roster holds (the demo refuses a database in use).
-- name: dienstverband_count
SELECT count(*) FROM rooster.dienstverband;

-- The check's second builder (crates/tools/src/demo/oracle.rs): the rows of one key, as plain text,
-- read without rekenserver.vraag.
-- name: oracle_dienstverband
SELECT c.id, c.code, c.is_vier_weken, c.naam, c.werkweek_uren::text, dv.dagen_per_week::text,
       dv.datum_in_dienst::text, dv.datum_uit_dienst::text, dv.parttime_uren::text, dv.salaris::text,
       dv.garantie_toeslag::text, dv.garantie_trede_bedrag::text, dv.loon_toeslag::text, dv.soort,
       dv.functiegroep
  FROM rooster.dienstverband dv JOIN rooster.cao c ON c.id = dv.cao_id
 WHERE dv.id = $1;

-- name: oracle_periode
SELECT begin_datum::text, eind_datum::text FROM rooster.periode WHERE id = $1;

-- name: oracle_blocks
SELECT d.id, d.datum::text, to_char(t.begin_tijd, 'HH24:MI'), to_char(t.eind_tijd, 'HH24:MI'), t.is_ziek,
       dt.code, dt.telt_mee_in_gewerkte_uren, t.verlof
  FROM rooster.dienst d
  JOIN rooster.tijdblok t ON t.dienst_id = d.id
  JOIN rooster.dienst_type dt ON dt.code = t.dienst_type
  JOIN rooster.periode p ON p.id = $2
 WHERE d.dienstverband_id = $1 AND d.datum BETWEEN p.begin_datum AND p.eind_datum
 ORDER BY d.datum, d.id, t.begin_tijd, t.id;

-- name: oracle_history
-- The stored factors of the dienstverband's periods that begin in the 12 months before
-- period $2 (of its CAO's kind), period by period.
SELECT hp.id, hp.begin_datum::text, hp.eind_datum::text, f.loonfactor_code, f.waarde::text
  FROM rooster.periode p
  JOIN rooster.dienstverband dv ON dv.id = $1
  JOIN rooster.cao c ON c.id = dv.cao_id
  JOIN rooster.periode hp ON hp.is_vier_weken = c.is_vier_weken
       AND hp.begin_datum >= p.begin_datum - interval '12 months' AND hp.eind_datum < p.begin_datum
  JOIN rekenserver.resultaat r ON r.dienstverband_id = dv.id AND r.periode_id = hp.id
  JOIN rekenserver.resultaat_factor f ON f.dienstverband_id = dv.id AND f.periode_id = hp.id
 WHERE p.id = $2
 ORDER BY hp.begin_datum, hp.id, f.loonfactor_code;

-- On the demo's own cluster: the logins its workers and planners use (given
-- sbworker_worker and sbworker_sender by the install's grant; neither a superuser).
-- name: demo_logins
DO $$
BEGIN
    CREATE ROLE sbworker_demo_worker LOGIN;
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;
DO $$
BEGIN
    CREATE ROLE sbworker_demo_planner LOGIN;
EXCEPTION WHEN duplicate_object THEN NULL;
END $$

-- name: dialog_reuse
-- Conversation reuse on, with this idle time in seconds (rekenserver.instelling).
INSERT INTO rekenserver.instelling (naam, waarde) VALUES ('dialog_reuse_idle_seconds', $1)
ON CONFLICT (naam) DO UPDATE SET waarde = EXCLUDED.waarde;

-- name: dialogs_used
-- The requests sent, and the dialogs that carried them (fewer with conversation reuse).
SELECT count(*), count(DISTINCT dialog_handle) FROM rekenserver.berekening_log

-- name: keys_computed
-- A split demo's calculation server: the keys it computed (its version claims).
SELECT count(*) FROM sbworker.answered_version;
