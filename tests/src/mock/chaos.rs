//! Fault injection for the resilience tests: with a [`MockChaos`] set, a share of the
//! requests (to every model, or to the models it names) fails with one of four faults, drawn
//! from a seeded generator so a run of a test sees the same sequence:
//!
//! | fault | what the caller sees |
//! |---|---|
//! | `rateLimited` | `429`, with `Retry-After` when the setting gives one |
//! | `serverError` | `500` |
//! | `reset` | `200` and an event stream whose body breaks before its first event |
//! | `stall` | nothing at all until the caller gives up (or the server stops) |
//!
//! `GET /_mock/chaos` reports how many requests were drawn and how many of each fault were
//! served ([`ChaosReport`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The fault setting (`PUT /_mock/chaos`; `DELETE` turns it off).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MockChaos {
    /// The share of requests that fail, 0 to 1.
    pub rate: f64,
    /// The generator's seed.
    pub seed: u64,
    /// Only requests to these models fail (empty: every model).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// `Retry-After` (seconds) sent with a `429`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
}

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Fault {
    RateLimited,
    ServerError,
    Reset,
    Stall,
}

/// What the faults did so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosReport {
    /// Requests the setting applied to (faulted or not).
    pub requests: u64,
    pub faults: BTreeMap<Fault, u64>,
}

#[derive(Default)]
pub(crate) struct Chaos {
    setting: Option<MockChaos>,
    report: ChaosReport,
}

impl Chaos {
    pub(crate) fn set(&mut self, setting: Option<MockChaos>) {
        *self = Self { setting, report: ChaosReport::default() };
    }

    pub(crate) fn report(&self) -> ChaosReport {
        self.report.clone()
    }

    /// The fault for the next request to `model`, if it gets one, and the setting's
    /// `Retry-After`.
    pub(crate) fn draw(&mut self, model: &str) -> Option<(Fault, Option<u64>)> {
        let setting = self.setting.as_ref()?;
        if !setting.models.is_empty() && !setting.models.iter().any(|m| m == model) {
            return None;
        }
        self.report.requests += 1;
        let x = splitmix(setting.seed ^ self.report.requests.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let share = (x >> 11) as f64 / (1u64 << 53) as f64;
        if share >= setting.rate {
            return None;
        }
        let fault = [Fault::RateLimited, Fault::ServerError, Fault::Reset, Fault::Stall][(x % 4) as usize];
        *self.report.faults.entry(fault).or_default() += 1;
        Some((fault, setting.retry_after_seconds))
    }
}

/// SplitMix64: a well-mixed 64-bit value from any input.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_and_the_mix_follow_the_setting_and_the_seed() {
        let mut chaos = Chaos::default();
        let setting = MockChaos { rate: 0.3, seed: 7, models: vec!["flaky".into()], retry_after_seconds: Some(1) };
        chaos.set(Some(setting.clone()));
        let drawn: Vec<Option<Fault>> = (0..10_000).map(|_| chaos.draw("flaky").map(|(f, _)| f)).collect();
        assert_eq!(chaos.draw("steady"), None, "other models are left alone");
        let report = chaos.report();
        assert_eq!(report.requests, 10_000);
        let faulted: u64 = report.faults.values().sum();
        assert!((2_700..3_300).contains(&faulted), "{faulted}");
        assert_eq!(report.faults.len(), 4, "every kind: {report:?}");
        // The same seed, the same sequence.
        chaos.set(Some(setting));
        let again: Vec<Option<Fault>> = (0..10_000).map(|_| chaos.draw("flaky").map(|(f, _)| f)).collect();
        assert_eq!(drawn, again);
    }
}
