//! The response cache's contract: an answer is read back under its tenant and key until it
//! expires, replaced by a later one under the same key, never seen by another tenant, and
//! removed once expired.

use chrono::Duration;

use super::fixtures::{a, b, t0};
use crate::error::StoreError;
use crate::model::cache::CachedAnswer;
use crate::model::{FinishReason, ToolCall};
use crate::stores::Stores;

fn answer(text: &str) -> CachedAnswer {
    CachedAnswer {
        text: text.into(),
        tool_calls: vec![ToolCall { id: "c1".into(), name: "lookup".into(), arguments: "{\"id\":7}".into() }],
        reasoning: Vec::new(),
        finish: Some(FinishReason::ToolCalls),
        model: Some("m-2025".into()),
    }
}

pub async fn cached_answers_are_read_per_tenant_until_they_expire(s: Stores) {
    let c = &s.response_cache;
    let later = t0() + Duration::minutes(10);
    assert_eq!(c.get(&a(), "k1", t0()).await.unwrap(), None);
    c.put(&a(), "k1", &answer("first"), later).await.unwrap();
    assert_eq!(c.get(&a(), "k1", t0()).await.unwrap(), Some(answer("first")));
    assert_eq!(c.get(&b(), "k1", t0()).await.unwrap(), None, "another tenant never sees it");
    assert_eq!(c.get(&a(), "k1", later).await.unwrap(), None, "expired at its time");
    c.put(&a(), "k1", &answer("second"), later + Duration::minutes(10)).await.unwrap();
    assert_eq!(c.get(&a(), "k1", later).await.unwrap().map(|x| x.text), Some("second".to_owned()));
    c.put(&b(), "k1", &answer("theirs"), later).await.unwrap();
    assert_eq!(c.get(&a(), "k1", t0()).await.unwrap().map(|x| x.text), Some("second".to_owned()));
    assert!(matches!(c.put(&a(), "k2", &answer("bad\u{0}"), later).await, Err(StoreError::InvalidText { .. })));

    // Purging takes the expired answers of every tenant, and only those.
    c.put(&a(), "old", &answer("old"), t0() - Duration::minutes(1)).await.unwrap();
    c.put(&b(), "old", &answer("old"), t0() - Duration::minutes(1)).await.unwrap();
    assert_eq!(c.purge_expired(t0(), 100).await.unwrap(), 2);
    assert_eq!(c.purge_expired(t0(), 100).await.unwrap(), 0);
    assert!(c.get(&a(), "k1", t0()).await.unwrap().is_some());
}
