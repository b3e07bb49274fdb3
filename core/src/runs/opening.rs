//! The run row's write, overlapped with the first model call ([`Opening`]).
//!
//! A run that streams to its caller or answers it at its end (`launch`'s `Live` and
//! `Buffered` deliveries) does not wait for its row before calling the model: `prepare`
//! hands the `INSERT` over as an [`Opening`], the engine's first model call waits for the
//! model and the row together (`engine::model_turn`), and the surface gets the run only once
//! the row exists — the `run` frame, the response headers, a `GET /api/runs/{id}` right after
//! all find it, and a store that cannot take the row still refuses the run (`503`) before
//! anything streams. Nothing the run writes (events, steps, the session, the row's close)
//! goes out before the row: the recorder and `execute` wait for the opening first, and a run
//! whose row could not be written is abandoned without writing anything.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::error::StoreError;

/// The run row: written already, or being written.
#[derive(Clone, Default)]
pub struct Opening(Option<Shared<BoxFuture<'static, Result<(), StoreError>>>>);

impl Opening {
    /// The row is written (or the run is not recorded, or its row is another's to write).
    pub fn written() -> Self {
        Self(None)
    }

    /// The row's write, started by whoever first waits for it.
    pub fn pending(write: BoxFuture<'static, Result<(), StoreError>>) -> Self {
        Self(Some(write.shared()))
    }

    /// Waits for the row; `Err` when it could not be written.
    pub async fn wait(&self) -> Result<(), StoreError> {
        match &self.0 {
            None => Ok(()),
            Some(write) => write.clone().await,
        }
    }

    /// Whether the row is written, without waiting.
    pub fn is_written(&self) -> bool {
        self.0.as_ref().is_none_or(|w| matches!(w.peek(), Some(Ok(()))))
    }
}

impl std::fmt::Debug for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_written() { "Opening(written)" } else { "Opening(pending)" })
    }
}
