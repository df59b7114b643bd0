//! The standalone outbox migrator's command line: `sea-orm-cli migrate <up|down|status|fresh>
//! -d migration -u URL` runs this binary, as does `cargo run -p sea-orm-outbox-migration --
//! <command> -u URL`. Its history is kept in `seaql_migrations_outbox`.
#[tokio::main]
async fn main() {
    sea_orm_migration::cli::run_cli(sea_orm_outbox_migration::Migrator).await;
}
