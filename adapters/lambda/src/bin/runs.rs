//! The `runs` function: reading runs, their event logs (streams) and statistics; cancelling.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tracon_lambda::serve(&tracon_handlers::groups::deployments::RUNS).await
}
