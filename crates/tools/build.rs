//! The build script of `sbworker-tools`: the statements of the tools' own SQL
//! (`sql/*/statements/*.sql`: the bench, the demo, the throwaway cluster, the emulator)
//! as constants of `statements`, generated as `sbworker-core`'s are.

include!("../core/statements_gen.rs");

fn main() {
    generate(&[("postgres", Path::new("sql/postgres/statements")), ("mssql", Path::new("sql/mssql/statements"))]);
}
