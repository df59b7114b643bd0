//! The migration command line that `sea-orm-cli migrate -d examples/existing_app/migration`
//! runs (`cargo run --manifest-path examples/existing_app/migration/Cargo.toml -- up -u URL`).
use sea_orm_migration::prelude::*;

#[tokio::main]
async fn main() {
    cli::run_cli(migration::Migrator).await;
}
