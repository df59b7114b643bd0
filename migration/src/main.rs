//! `sea-orm-cli migrate -d migration` and `cargo run -p migration -- <up|down|status|fresh>`.
use sea_orm_migration::prelude::*;

#[tokio::main]
async fn main() {
    cli::run_cli(migration::Migrator).await;
}
