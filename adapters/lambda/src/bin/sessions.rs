//! The `sessions` function: sessions (buffered).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    tracon_lambda::serve(&tracon_handlers::groups::deployments::SESSIONS).await
}
