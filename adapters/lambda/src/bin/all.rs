//! The `all` function: every endpoint group (streams).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tracon_lambda::serve(&tracon_handlers::groups::deployments::ALL).await
}
