//! The job transport on Lambda: an SQS message per job.
//!
//! A queued run (`Prefer: respond-async`) or a due job is woken with one `SendMessage` to the
//! queue named by `Tracon:Queue:SqsQueueUrl`; the message body is the job's id and nothing
//! else — the job's row in Postgres is the truth, so a lost message only delays the job until
//! the next tick. The consumer function ([`crate::consumer`]) is fed by the queue's event
//! source mapping. Requests are signed with SigV4 by the AWS signer (`aws-sigv4`) with the
//! execution role's credentials, which Lambda puts in the environment, and spoken in SQS's
//! JSON protocol; `Tracon:Queue:SqsEndpoint` points them elsewhere (a VPC endpoint, an
//! emulator).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use tracon_core::config::{Config, env_name};
use tracon_core::jobs::{JobSettings, JobTransport};
use tracon_core::runtime::RunQueue;
use tracon_handlers::AppState;

/// Where and how to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    /// The queue's URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`).
    pub queue_url: String,
    /// Where requests go: the queue URL's origin unless `Tracon:Queue:SqsEndpoint` says otherwise.
    pub endpoint: String,
    /// The signing region: `Tracon:Queue:SqsRegion`, else `AWS_REGION` (set by Lambda), else
    /// the one in the queue URL's host.
    pub region: String,
}

impl QueueSettings {
    pub const QUEUE_URL: &str = "Tracon:Queue:SqsQueueUrl";
    pub const ENDPOINT: &str = "Tracon:Queue:SqsEndpoint";
    pub const REGION: &str = "Tracon:Queue:SqsRegion";

    /// `None` when no queue URL is configured (then this host queues nothing).
    pub fn from_config(config: &Config) -> Result<Option<Self>, String> {
        let Some(queue_url) = config.get(Self::QUEUE_URL).map(str::trim).filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let url = reqwest::Url::parse(queue_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "https" | "http") && u.host_str().is_some())
            .ok_or_else(|| {
                format!(
                    "{} ({}) must be the queue's URL, such as https://sqs.eu-west-1.amazonaws.com/123456789012/tracon-jobs",
                    Self::QUEUE_URL,
                    env_name(Self::QUEUE_URL)
                )
            })?;
        let endpoint = match config.get(Self::ENDPOINT).map(str::trim).filter(|e| !e.is_empty()) {
            Some(e) => {
                let parsed = reqwest::Url::parse(e)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "https" | "http") && u.host_str().is_some())
                    .ok_or_else(|| {
                        format!("{} ({}) must be an http(s) URL", Self::ENDPOINT, env_name(Self::ENDPOINT))
                    })?;
                parsed.origin().ascii_serialization()
            }
            None => url.origin().ascii_serialization(),
        };
        let from_host = url.host_str().and_then(|h| {
            let mut parts = h.split('.');
            (parts.next() == Some("sqs")).then(|| parts.next()).flatten().map(str::to_owned)
        });
        let region = config
            .first(&[Self::REGION, "AWS_REGION", "AWS_DEFAULT_REGION"])
            .map(str::to_owned)
            .or(from_host)
            .ok_or_else(|| {
                format!("{} needs a region: set AWS_REGION or {}", Self::QUEUE_URL, env_name(Self::REGION))
            })?;
        Ok(Some(Self { queue_url: queue_url.to_owned(), endpoint: format!("{endpoint}/"), region }))
    }
}

/// The execution role's credentials, as Lambda hands them to the function.
#[derive(Clone)]
struct EnvCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl EnvCredentials {
    fn from_config(config: &Config) -> Result<Self, String> {
        let missing = || {
            "the SQS queue needs AWS credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (Lambda sets them from the execution role)".to_owned()
        };
        Ok(Self {
            access_key_id: config.get("AWS_ACCESS_KEY_ID").ok_or_else(missing)?.to_owned(),
            secret_access_key: config.get("AWS_SECRET_ACCESS_KEY").ok_or_else(missing)?.to_owned(),
            session_token: config.get("AWS_SESSION_TOKEN").map(str::to_owned),
        })
    }
}

/// Wakes the consumer with an SQS message carrying the job's id.
pub struct SqsTransport {
    client: reqwest::Client,
    settings: QueueSettings,
    credentials: EnvCredentials,
}

impl SqsTransport {
    pub fn new(config: &Config, settings: QueueSettings) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("could not build the HTTP client: {e}"))?;
        Ok(Self { client, settings, credentials: EnvCredentials::from_config(config)? })
    }

    /// The transport when a queue is configured.
    pub fn from_config(config: &Config) -> Result<Option<Self>, String> {
        QueueSettings::from_config(config)?.map(|s| Self::new(config, s)).transpose()
    }

    /// One signed call of SQS's JSON protocol (`AmazonSQS.<action>`).
    async fn call(&self, action: &str, body: serde_json::Value) -> Result<serde_json::Value, String> {
        let body = body.to_string().into_bytes();
        let target = format!("AmazonSQS.{action}");
        let headers = [("content-type", "application/x-amz-json-1.0"), ("x-amz-target", target.as_str())];
        let c = &self.credentials;
        let identity = Credentials::new(
            &c.access_key_id,
            &c.secret_access_key,
            c.session_token.clone(),
            None,
            "lambda-environment",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.settings.region)
            .name("sqs")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| format!("could not sign the SQS request: {e}"))?
            .into();
        let signable =
            SignableRequest::new("POST", &self.settings.endpoint, headers.iter().copied(), SignableBody::Bytes(&body))
                .map_err(|e| format!("could not sign the SQS request: {e}"))?;
        let (instructions, _) =
            sign(signable, &params).map_err(|e| format!("could not sign the SQS request: {e}"))?.into_parts();
        let mut request = http::Request::post(&self.settings.endpoint);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let mut request = request.body(body).map_err(|e| format!("could not build the SQS request: {e}"))?;
        instructions.apply_to_request_http1x(&mut request);
        let request =
            reqwest::Request::try_from(request).map_err(|e| format!("could not build the SQS request: {e}"))?;
        let response = self.client.execute(request).await.map_err(|e| format!("SQS could not be reached: {e}"))?;
        let status = response.status();
        let answer: serde_json::Value = response.json().await.unwrap_or(serde_json::Value::Null);
        if !status.is_success() {
            // The error's type (`AWS.SimpleQueueService.NonExistentQueue`, …) is for the log.
            let kind = answer.get("__type").and_then(|t| t.as_str()).unwrap_or("unknown");
            return Err(format!("SQS answered {status} ({kind})"));
        }
        Ok(answer)
    }
}

#[async_trait::async_trait]
impl JobTransport for SqsTransport {
    async fn wake(&self, job: uuid::Uuid) -> Result<(), String> {
        let body = serde_json::json!({"QueueUrl": self.settings.queue_url, "MessageBody": job.to_string()});
        self.call("SendMessage", body).await.map(|_| ())
    }
}

/// Turns queued runs on for an HTTP function when a queue is configured; without one,
/// `Prefer: respond-async` is ignored and runs stream.
pub fn with_queue(state: AppState, config: &Config) -> Result<AppState, String> {
    let Some(transport) = SqsTransport::from_config(config)? else { return Ok(state) };
    let jobs = JobSettings::from_config(config).map_err(|e| e.to_string())?;
    state.runtime.set_queue(RunQueue { transport: Arc::new(transport), max_attempts: jobs.max_attempts });
    Ok(state)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Config {
        Config::from_pairs(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
    }

    #[test]
    fn no_queue_url_means_no_queue() {
        assert_eq!(QueueSettings::from_config(&config(&[])).unwrap(), None);
    }

    #[test]
    fn the_endpoint_and_region_come_from_the_queue_url_unless_configured() {
        let url = "https://sqs.eu-west-1.amazonaws.com/123456789012/tracon-jobs";
        let s = QueueSettings::from_config(&config(&[("Tracon__Queue__SqsQueueUrl", url)])).unwrap().unwrap();
        assert_eq!((s.endpoint.as_str(), s.region.as_str()), ("https://sqs.eu-west-1.amazonaws.com/", "eu-west-1"));
        let s = QueueSettings::from_config(&config(&[
            ("Tracon__Queue__SqsQueueUrl", url),
            ("Tracon__Queue__SqsEndpoint", "http://127.0.0.1:4566/ignored/path"),
            ("AWS_REGION", "us-east-2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((s.endpoint.as_str(), s.region.as_str()), ("http://127.0.0.1:4566/", "us-east-2"));
    }

    #[test]
    fn a_bad_queue_url_or_a_missing_region_is_a_startup_error() {
        assert!(QueueSettings::from_config(&config(&[("Tracon__Queue__SqsQueueUrl", "tracon-jobs")])).is_err());
        let local = "http://127.0.0.1:4566/123456789012/jobs";
        assert!(QueueSettings::from_config(&config(&[("Tracon__Queue__SqsQueueUrl", local)])).is_err());
        let e = SqsTransport::from_config(&config(&[("Tracon__Queue__SqsQueueUrl", local), ("AWS_REGION", "x")]));
        assert!(e.is_err_and(|e| e.contains("AWS_ACCESS_KEY_ID")));
    }
}
