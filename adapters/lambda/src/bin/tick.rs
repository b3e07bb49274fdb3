//! The `tick` function: the periodic tick on an EventBridge schedule (see `tracon_lambda::consumer`).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracon_lambda::consumer::serve_tick().await
}
