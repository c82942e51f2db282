//! The build script of `sbworker-core`: the statements of `broker/*/statements/*.sql`
//! as constants of `sql::statements` (see `statements_gen.rs`).

include!("statements_gen.rs");

fn main() {
    generate(&[
        ("postgres", Path::new("../../broker/postgres/statements")),
        ("mssql", Path::new("../../broker/mssql/statements")),
    ]);
}
