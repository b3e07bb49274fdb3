//! Azure OpenAI Chat Completions (`azure-openai`): a thin provider over the OpenAI Chat
//! Completions body and stream parser ([`super::openai`]).
//!
//! What differs from OpenAI is only the address and the credential: `POST
//! {endpoint}/openai/deployments/{deployment}/chat/completions?api-version={v}` with an
//! `api-key` header, where the deployment is [`ModelBinding::model`] (the deployment name,
//! not the base model's). The api-version defaults to [`DEFAULT_API_VERSION`], the last GA
//! release of the dated data-plane inference API; it carries `max_completion_tokens`,
//! `stream_options.include_usage` and JSON-schema structured output. The provider takes no
//! `providerSettings` key: any is a compile error (the compiler refuses a key a provider does
//! not list).
//!
//! Azure's content filter answers a prompt it refuses with `400` and `code: content_filter`;
//! that is the provider's safety filter, not a failure, so it becomes
//! `Finish(ContentFilter)` as a filtered completion does (the run fails `content_filtered`
//! and a healthy provider is not counted as failing).

use futures::{StreamExt, stream};
use serde_json::Value;

use super::openai::{self, ChatBody, Flavor};
use super::{FinishReason, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ProviderErrorKind};
use crate::definition::ModelBinding;

pub const AZURE_OPENAI: &str = "azure-openai";
/// The last GA release of Azure OpenAI's dated data-plane inference API.
pub const DEFAULT_API_VERSION: &str = "2024-10-21";
/// Azure's longest deployment name.
const MAX_DEPLOYMENT: usize = 64;

pub struct AzureOpenAiProvider {
    endpoint: reqwest::Url,
    api_key: String,
    api_version: String,
    client: reqwest::Client,
}

impl AzureOpenAiProvider {
    /// `endpoint` is the resource's absolute URL (`https://my-resource.openai.azure.com/`, or
    /// a gateway's, whose path is kept); `api_version` defaults to [`DEFAULT_API_VERSION`].
    pub fn new(
        client: reqwest::Client,
        endpoint: &str,
        api_key: String,
        api_version: Option<String>,
    ) -> Result<Self, String> {
        let endpoint = super::sse::endpoint_url(endpoint, AZURE_OPENAI)?;
        if api_key.is_empty() {
            return Err("The Azure OpenAI provider needs an API key.".to_owned());
        }
        let api_version =
            api_version.filter(|v| !v.trim().is_empty()).unwrap_or_else(|| DEFAULT_API_VERSION.to_owned());
        Ok(Self { endpoint, api_key, api_version, client })
    }

    /// The chat completions URL of `deployment`; the name is one path segment, escaped.
    pub fn url(&self, deployment: &str) -> Result<reqwest::Url, ProviderError> {
        let path = ["openai", "deployments", deployment, "chat", "completions"];
        super::sse::url_under(&self.endpoint, &path, ("api-version", &self.api_version))
    }

    async fn start(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let builder = self
            .client
            .post(self.url(&request.model)?)
            .header("api-key", &self.api_key)
            .json(&ChatBody::new(request, Flavor::OpenAi, super::openai::StructuredSupport::JsonSchema));
        match openai::stream_chat(builder, classify).await {
            Err(e) if e.kind == ProviderErrorKind::ContentFiltered => {
                // Which categories tripped is worth a log line; the run learns only that it was filtered.
                tracing::info!(detail = %e.detail, "Azure OpenAI's content filter refused the prompt");
                Ok(stream::iter([Ok(ModelEvent::Finish(FinishReason::ContentFilter))]).boxed())
            }
            other => other,
        }
    }
}

/// A deployment name as Azure allows it: letters, digits, `-`, `_`, `.`, at most 64.
fn is_deployment_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_DEPLOYMENT
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name != "."
        && name != ".."
}

/// Azure's failure statuses, with its prompt filter told apart from other 400s.
fn classify(status: u16, body: &str) -> ProviderError {
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.pointer("/error/code").and_then(Value::as_str).map(str::to_owned));
    if status == 400 && code.as_deref() == Some("content_filter") {
        let mut e = ProviderError::content_filtered();
        e.status = Some(status);
        e.detail = format!("HTTP {status}: {}", body.chars().take(2_000).collect::<String>());
        return e;
    }
    ProviderError::from_status(status, body)
}

#[async_trait::async_trait]
impl ModelProvider for AzureOpenAiProvider {
    fn name(&self) -> &str {
        AZURE_OPENAI
    }

    fn with_credential(
        &self,
        credential: &super::byok::TenantCredential<'_>,
    ) -> Option<std::sync::Arc<dyn ModelProvider>> {
        let (endpoint, client) = match credential.endpoint {
            Some((url, client)) => (super::sse::endpoint_url(url, AZURE_OPENAI).ok()?, client.clone()),
            None => (self.endpoint.clone(), self.client.clone()),
        };
        Some(std::sync::Arc::new(Self {
            endpoint,
            api_key: credential.api_key.to_owned(),
            api_version: self.api_version.clone(),
            client,
        }))
    }

    fn check_binding(&self, binding: &ModelBinding) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if !is_deployment_name(&binding.model) {
            out.push((
                "model.model".to_owned(),
                format!(
                    "For azure-openai the model is a deployment name: letters, digits, '-', '_' and '.', at most {MAX_DEPLOYMENT} characters."
                ),
            ));
        }
        out.extend(openai::check_structured_output(binding));
        out
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        // reqwest's wasm32 futures are !Send; see crate::platform.
        let answer = crate::platform::send_future(self.start(request)).await;
        super::without_secret(answer, Some(self.api_key.clone()))
    }

    /// `GET /openai/models`: the resource's model list, costs nothing. It proves the resource
    /// and the key, not a deployment: a wrong deployment name still fails its run with `404`.
    async fn health(&self) -> Option<Result<(), ProviderError>> {
        let check = async {
            let url = super::sse::url_under(&self.endpoint, &["openai", "models"], ("api-version", &self.api_version))?;
            super::sse::reach(self.client.get(url).header("api-key", &self.api_key), classify).await
        };
        let answer = crate::platform::send_future(check).await;
        Some(answer.map_err(|e| e.without_secret(&self.api_key)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::definition::ResponseFormat;

    fn provider(endpoint: &str) -> AzureOpenAiProvider {
        AzureOpenAiProvider::new(reqwest::Client::new(), endpoint, "azure-key".into(), None).unwrap()
    }

    #[test]
    fn the_url_names_the_deployment_and_the_api_version() {
        let p = provider("https://my-resource.openai.azure.com/");
        assert_eq!(
            p.url("support-production").unwrap().as_str(),
            "https://my-resource.openai.azure.com/openai/deployments/support-production/chat/completions?api-version=2024-10-21"
        );
        // A gateway's path is kept; a configured version wins.
        let gw = AzureOpenAiProvider::new(
            reqwest::Client::new(),
            "https://gw.example.com/aoai/",
            "k".into(),
            Some("2025-04-01-preview".into()),
        )
        .unwrap();
        assert_eq!(
            gw.url("d1").unwrap().as_str(),
            "https://gw.example.com/aoai/openai/deployments/d1/chat/completions?api-version=2025-04-01-preview"
        );
        // Whatever a name holds stays one escaped segment.
        assert!(p.url("a/../b?x").unwrap().path().ends_with("/deployments/a%2F..%2Fb%3Fx/chat/completions"));
    }

    #[test]
    fn the_endpoint_must_be_absolute_and_a_key_present() {
        let c = reqwest::Client::new();
        assert!(AzureOpenAiProvider::new(c.clone(), "my-resource.openai.azure.com", "k".into(), None).is_err());
        assert!(AzureOpenAiProvider::new(c.clone(), "/openai", "k".into(), None).is_err());
        assert!(AzureOpenAiProvider::new(c.clone(), "https://r.openai.azure.com", String::new(), None).is_err());
        assert!(AzureOpenAiProvider::new(c, "https://r.openai.azure.com", "k".into(), None).is_ok());
    }

    #[test]
    fn a_deployment_name_is_checked_and_an_object_schema_required() {
        let p = provider("https://r.openai.azure.com");
        let mut b =
            ModelBinding { provider: AZURE_OPENAI.into(), model: "gpt-4o_prod.v2".into(), ..Default::default() };
        assert!(p.check_binding(&b).is_empty());
        for bad in ["", "a/b", "..", "a b", &"x".repeat(65)] {
            b.model = bad.into();
            assert_eq!(p.check_binding(&b)[0].0, "model.model", "{bad:?}");
        }
        b.model = "d".into();
        b.response_format = Some(ResponseFormat::JsonSchema {
            name: "n".into(),
            schema: json!({"type": "array"}),
            description: None,
            strict: None,
        });
        assert_eq!(p.check_binding(&b)[0].0, "model.responseFormat.schema");
    }

    #[test]
    fn a_prompt_filter_refusal_is_told_apart_from_other_400s() {
        let filtered = json!({"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            "type": null, "param": "prompt", "code": "content_filter", "status": 400,
            "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {"violence": {"filtered": true, "severity": "high"}}}}});
        let e = classify(400, &filtered.to_string());
        assert_eq!((e.kind, e.status), (ProviderErrorKind::ContentFiltered, Some(400)));
        assert!(e.detail.contains("ResponsibleAIPolicyViolation"));
        let other = json!({"error": {"code": "OperationNotSupported", "message": "The chatCompletion operation does not work with the specified model."}});
        assert_eq!(classify(400, &other.to_string()).kind, ProviderErrorKind::Rejected);
        assert_eq!(classify(401, "{}").kind, ProviderErrorKind::Unauthorized);
        assert_eq!(classify(429, r#"{"error":{"code":"429"}}"#).kind, ProviderErrorKind::RateLimited);
        assert_eq!(classify(404, "not json").kind, ProviderErrorKind::Rejected);
    }
}
