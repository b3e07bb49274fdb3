//! The `jobs` function: the SQS consumer that runs queued jobs (see `tracon_lambda::consumer`).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracon_lambda::consumer::serve_jobs().await
}
