//! The `agents` function: definitions, their history and the live run (streams).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tracon_lambda::serve(&tracon_handlers::groups::deployments::AGENTS).await
}
