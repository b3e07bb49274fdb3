//! Push notification configurations. A configuration is a webhook subscription of the key's
//! tenant to one task's event (`a2a.task.{taskId}`): it is stored, signed, delivered, retried
//! and disabled by `core::webhooks` like every subscription, and shows in `/api/webhooks`
//! with its delivery history. What differs: the body is A2A's `StreamResponse` (a
//! `statusUpdate` when the task ends), the signing secret is the tenant's
//! `Tracon:A2A:PushSecretName` key, and the client's `token` travels as
//! `X-A2A-Notification-Token`. `authentication` (credentials for the receiver) is refused:
//! a credential would have to be stored, and subscriptions store none. Creating and deleting a
//! configuration is audited before it applies (`webhook.create`, `webhook.delete`), as through
//! `/api/webhooks`.

use serde::Deserialize;
use serde_json::{Value, json};
use tracon_core::names::RunId;
use tracon_core::ports::new_id;
use tracon_core::webhooks::WebhookSubscription;
use tracon_core::webhooks::a2a::{TOKEN_HEADER, task_event};
use uuid::Uuid;

use super::Called;
use super::rpc::{self, PUSH_NOT_SUPPORTED, RpcError};
use super::tasks::find;
use super::wire;
use crate::audit;

/// A configuration as a client sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushIn {
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub authentication: Option<Value>,
    #[serde(default)]
    pub tenant: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigRef {
    #[serde(default)]
    task_id: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
}

/// At most this many push configurations per task.
pub const MAX_PER_TASK: usize = 8;

fn not_configured() -> RpcError {
    RpcError::new(PUSH_NOT_SUPPORTED, "Push notifications are not configured on this server.")
}

/// The configuration as A2A shows it.
fn shown(task_id: &str, subscription: &WebhookSubscription) -> Value {
    let mut config = json!({ "id": subscription.id.to_string(), "taskId": task_id, "url": subscription.url });
    if let Some(token) = subscription.headers.get(TOKEN_HEADER) {
        config["token"] = json!(token);
    }
    config
}

/// Stores a configuration for the task `run_id` (whose run may not have started yet).
/// Returns the subscription's id.
pub(crate) async fn subscribe(called: &Called<'_>, run_id: RunId, push: PushIn) -> Result<Uuid, RpcError> {
    wire::check_tenant(called.tenant, push.tenant.as_deref())?;
    let runtime = &called.state.runtime;
    let settings = &called.state.http.a2a;
    let secret_name = settings.push_secret_key(called.tenant).ok_or_else(not_configured)?;
    if runtime.webhooks.secret(called.tenant, &secret_name).is_none() {
        return Err(RpcError::new(
            PUSH_NOT_SUPPORTED,
            "Push notifications are not set up for this tenant: its signing secret has no value.",
        ));
    }
    if push.authentication.as_ref().is_some_and(|a| !a.is_null()) {
        return Err(RpcError::params(
            "'authentication' is not supported: every notification is signed (X-Tracon-Signature) and carries your 'token' as X-A2A-Notification-Token.",
        ));
    }
    let url = reqwest::Url::parse(push.url.trim()).map_err(|_| RpcError::params("'url' is not an absolute URL."))?;
    if push.url.len() > tracon_core::webhooks::MAX_URL_LEN {
        return Err(RpcError::params("'url' is too long."));
    }
    runtime.webhooks.egress.check_url(&url).map_err(|_| {
        RpcError::params(
            "The egress policy does not allow 'url' (a public HTTPS address unless the operator allows more).",
        )
    })?;
    let mut headers = std::collections::BTreeMap::new();
    if let Some(token) = push.token.filter(|t| !t.is_empty()) {
        let visible = token.chars().all(|c| c.is_ascii_graphic() || c == ' ');
        if token.len() > tracon_core::webhooks::MAX_HEADER_VALUE || !visible {
            return Err(RpcError::params("'token' is at most 1024 visible ASCII characters."));
        }
        headers.insert(TOKEN_HEADER.to_owned(), token);
    }
    let event = task_event(run_id);
    let store = &runtime.stores.webhooks;
    if store.subscribed(called.tenant, &event).await?.len() >= MAX_PER_TASK {
        return Err(RpcError::params(format!("A task has at most {MAX_PER_TASK} push notification configurations.")));
    }
    let now = runtime.platform.clock.now();
    let subscription = WebhookSubscription {
        id: new_id(runtime.platform.clock.as_ref()),
        tenant: called.tenant.clone(),
        url: url.to_string(),
        events: vec![event],
        secret_configuration_name: secret_name,
        headers,
        description: Some(format!("A2A push notifications of task {run_id} ({})", called.agent)),
        enabled: true,
        consecutive_failures: 0,
        disabled_at: None,
        created_at: now,
        updated_at: now,
    };
    // Audited before it applies, as every subscription write is: no entry, no configuration.
    let after = json!({ "url": subscription.url, "events": subscription.events, "source": "a2a" });
    let id = subscription.id.to_string();
    let entity = ("webhook", id.as_str());
    audit::record_before_apply(
        called.state,
        called.tenant,
        called.caller,
        "webhook.create",
        entity,
        None,
        Some(&after),
    )
    .await?;
    store.create(called.tenant, &subscription).await?;
    Ok(subscription.id)
}

/// Removes a configuration stored for a start that did not happen.
pub(crate) async fn unsubscribe(called: &Called<'_>, id: Uuid) {
    if let Err(e) = called.state.runtime.stores.webhooks.delete(called.tenant, id).await {
        tracing::warn!(subscription = %id, error = ?e, "could not remove the push configuration of a task that did not start");
    }
}

/// The task's configuration `id`, or `TaskNotFound`.
async fn config_of(called: &Called<'_>, task: &RunId, id: Option<&str>) -> Result<WebhookSubscription, RpcError> {
    let missing = || RpcError::task_not_found().with("reason", "No such push notification configuration.");
    let id = id.and_then(|i| Uuid::parse_str(i.trim()).ok()).ok_or_else(missing)?;
    let subscription = called.state.runtime.stores.webhooks.get(called.tenant, id).await?.ok_or_else(missing)?;
    if !subscription.events.contains(&task_event(*task)) {
        return Err(missing());
    }
    Ok(subscription)
}

pub(crate) async fn create(called: &Called<'_>, params: Value) -> Result<Value, RpcError> {
    if called.state.http.a2a.push_secret_name.is_none() {
        return Err(not_configured());
    }
    let push: PushIn = rpc::params(params)?;
    let task = push.task_id.clone().unwrap_or_default();
    let run = find(called, &task).await?;
    let id = subscribe(called, run.id, push).await?;
    let subscription = config_of(called, &run.id, Some(&id.to_string())).await?;
    Ok(shown(&task, &subscription))
}

pub(crate) async fn get(called: &Called<'_>, params: Value) -> Result<Value, RpcError> {
    if called.state.http.a2a.push_secret_name.is_none() {
        return Err(not_configured());
    }
    let r: ConfigRef = rpc::params(params)?;
    wire::check_tenant(called.tenant, r.tenant.as_deref())?;
    let run = find(called, &r.task_id).await?;
    Ok(shown(&r.task_id, &config_of(called, &run.id, r.id.as_deref()).await?))
}

pub(crate) async fn list(called: &Called<'_>, params: Value) -> Result<Value, RpcError> {
    if called.state.http.a2a.push_secret_name.is_none() {
        return Err(not_configured());
    }
    let r: ConfigRef = rpc::params(params)?;
    wire::check_tenant(called.tenant, r.tenant.as_deref())?;
    let run = find(called, &r.task_id).await?;
    let subscriptions = called.state.runtime.stores.webhooks.subscribed(called.tenant, &task_event(run.id)).await?;
    let configs: Vec<Value> = subscriptions.iter().map(|s| shown(&r.task_id, s)).collect();
    Ok(json!({ "configs": configs, "nextPageToken": "" }))
}

/// Idempotent: deleting a configuration that is gone succeeds.
pub(crate) async fn delete(called: &Called<'_>, params: Value) -> Result<Value, RpcError> {
    if called.state.http.a2a.push_secret_name.is_none() {
        return Err(not_configured());
    }
    let r: ConfigRef = rpc::params(params)?;
    wire::check_tenant(called.tenant, r.tenant.as_deref())?;
    let run = find(called, &r.task_id).await?;
    match config_of(called, &run.id, r.id.as_deref()).await {
        Ok(subscription) => {
            let before = json!({ "url": subscription.url, "events": subscription.events, "source": "a2a" });
            let id = subscription.id.to_string();
            let (state, tenant, caller) = (called.state, called.tenant, called.caller);
            audit::record_before_apply(state, tenant, caller, "webhook.delete", ("webhook", &id), Some(&before), None)
                .await?;
            called.state.runtime.stores.webhooks.delete(called.tenant, subscription.id).await?;
        }
        Err(e) if e.code == rpc::TASK_NOT_FOUND => {}
        Err(e) => return Err(e),
    }
    Ok(json!({}))
}
