-- The statements of the throwaway cluster (crates/tools/src/pg_cluster.rs). {name} is an identifier
-- the code quotes (a statement takes no parameter there).

-- name: create_database
CREATE DATABASE {name};
