//! The harness loop (`harness.loop`): the agent is invoked again until its stop criteria say
//! the work is finished, at most `maxIterations` times (10 by default; the ceiling is never
//! open).
//!
//! After each answer but the last the criteria are evaluated in order; the first that asks for
//! another iteration wins (the rest are not evaluated), and its feedback is the next
//! iteration's user message. A criterion that fails to evaluate stops the loop without failing
//! the run. Each evaluated iteration writes a `loop.iteration_completed` event; the turn that
//! reaches the ceiling is not evaluated, and the event before it carries `ceilingReached`.
//!
//! Built-in kinds take data only — `completionMarker` (`marker`), `todoCompletion` (`modes`),
//! `aiJudge` (`judgeCriteria`, `judgeInstructions`, on the installation's judge binding),
//! `backgroundTaskCompletion` — and a kind whose logic is code is registered by name
//! ([`crate::runtime::RuntimeBuilder::add_loop_evaluator`]). A kind that is neither is refused
//! at save.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;

use crate::definition::{AgentDefinition, LoopCriterion};
use crate::model::{Message, ModelEvent, ModelProvider, ModelRequest};
use crate::names::{RunId, TenantId};
use crate::report::{Problem, ProblemCode};
use crate::runs::store::RunStore;

pub use crate::definition::{DEFAULT_LOOP_ITERATIONS as DEFAULT_MAX_ITERATIONS, MAX_LOOP_ITERATIONS as MAX_ITERATIONS};
/// Most criteria a loop may declare.
pub const MAX_CRITERIA: usize = 8;
/// Longest `marker`, `judgeCriteria` or `judgeInstructions`.
pub const MAX_CRITERION_TEXT: usize = 4_000;

/// The built-in criterion kinds.
pub const BUILT_IN: [&str; 4] = ["completionMarker", "todoCompletion", "aiJudge", "backgroundTaskCompletion"];

/// The next iteration's message when a criterion gives no feedback of its own.
pub const DEFAULT_FEEDBACK: &str = "The work is not finished yet. Continue.";

/// What a criterion decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopEvaluation {
    Stop,
    /// Another iteration, with feedback for the model (none: [`DEFAULT_FEEDBACK`]).
    Continue(Option<String>),
}

/// What a criterion sees of the run after an iteration.
pub struct LoopContext<'a> {
    pub tenant: &'a TenantId,
    pub run_id: RunId,
    /// The iteration just answered, from 1.
    pub iteration: u32,
    /// Its answer.
    pub last_text: &'a str,
    /// The whole conversation so far.
    pub messages: &'a [Message],
    pub runs: &'a Arc<dyn RunStore>,
}

/// A criterion written in code. An `Err` stops the loop (it does not fail the run).
#[async_trait::async_trait]
pub trait LoopEvaluator: Send + Sync {
    async fn evaluate(&self, criterion: &LoopCriterion, context: &LoopContext<'_>) -> Result<LoopEvaluation, String>;
}

/// The model `aiJudge` asks (`Tracon:Harness:Judge:Provider` / `:Model`).
#[derive(Clone)]
pub struct JudgeBinding {
    pub provider: Arc<dyn ModelProvider>,
    pub model: String,
}

/// The registered criteria and the judge binding.
#[derive(Clone, Default)]
pub struct Loops {
    pub evaluators: BTreeMap<String, Arc<dyn LoopEvaluator>>,
    pub judge: Option<JudgeBinding>,
}

impl Loops {
    /// The problems of `def`'s loop, for the save path and compilation.
    pub fn check(&self, def: &AgentDefinition) -> Vec<Problem> {
        let mut p = Vec::new();
        let Some(settings) = def.harness.as_ref().and_then(|h| h.r#loop.as_ref()) else { return p };
        if settings.criteria.is_empty() || settings.criteria.len() > MAX_CRITERIA {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "harness.loop.criteria",
                format!("A loop needs 1 to {MAX_CRITERIA} criteria."),
            ));
        }
        if settings.max_iterations.is_some_and(|n| !(1..=MAX_ITERATIONS).contains(&n)) {
            p.push(Problem::new(
                ProblemCode::OutOfRange,
                "harness.loop.maxIterations",
                format!("maxIterations must be between 1 and {MAX_ITERATIONS}."),
            ));
        }
        for (i, c) in settings.criteria.iter().enumerate() {
            let at = |field: &str| format!("harness.loop.criteria[{i}].{field}");
            let too_long = |v: &Option<String>| v.as_ref().is_some_and(|t| t.chars().count() > MAX_CRITERION_TEXT);
            if too_long(&c.marker) || too_long(&c.judge_criteria) || too_long(&c.judge_instructions) {
                p.push(Problem::new(
                    ProblemCode::LimitExceeded,
                    format!("harness.loop.criteria[{i}]"),
                    format!("A criterion's texts are at most {MAX_CRITERION_TEXT} characters."),
                ));
            }
            let blank = |v: &Option<String>| v.as_deref().is_none_or(|t| t.trim().is_empty());
            match c.kind.as_str() {
                "completionMarker" if blank(&c.marker) => {
                    p.push(Problem::new(ProblemCode::Required, at("marker"), "completionMarker needs a marker."))
                }
                "aiJudge" if blank(&c.judge_criteria) => {
                    p.push(Problem::new(ProblemCode::Required, at("judgeCriteria"), "aiJudge needs judgeCriteria."))
                }
                "aiJudge" if self.judge.is_none() => p.push(Problem::new(
                    ProblemCode::InvalidHarness,
                    at("kind"),
                    "aiJudge needs a judge binding: set Tracon__Harness__Judge__Provider and __Model.",
                )),
                "todoCompletion" => {
                    for (j, mode) in c.modes.iter().flatten().enumerate() {
                        if !matches!(mode.as_str(), "unchecked" | "inProgress") {
                            p.push(Problem::new(
                                ProblemCode::InvalidHarness,
                                format!("harness.loop.criteria[{i}].modes[{j}]"),
                                "A todoCompletion mode is 'unchecked' or 'inProgress'.",
                            ));
                        }
                    }
                }
                kind if BUILT_IN.contains(&kind) || self.evaluators.contains_key(kind) => {}
                kind => p.push(Problem::new(
                    ProblemCode::InvalidHarness,
                    at("kind"),
                    format!(
                        "Unknown loop criterion kind '{}': use one of {} or a kind registered in code.",
                        crate::names::truncate_for_message(kind),
                        BUILT_IN.join(", ")
                    ),
                )),
            }
        }
        p
    }

    /// Evaluates `criterion` after an iteration.
    pub async fn evaluate(
        &self,
        criterion: &LoopCriterion,
        context: &LoopContext<'_>,
    ) -> Result<LoopEvaluation, String> {
        match criterion.kind.as_str() {
            "completionMarker" => {
                let marker = criterion.marker.as_deref().unwrap_or_default();
                Ok(if context.last_text.contains(marker) {
                    LoopEvaluation::Stop
                } else {
                    LoopEvaluation::Continue(Some(format!(
                        "The work is not finished. When it is, say so by including \"{marker}\" in your answer."
                    )))
                })
            }
            "todoCompletion" => Ok(todo_completion(criterion, context.messages)),
            "aiJudge" => self.judge(criterion, context).await,
            "backgroundTaskCompletion" => {
                // A child run left running past its caller's wait timeout is a task still
                // going in the background.
                let tree =
                    context.runs.list_tree(context.tenant, context.run_id).await.map_err(|e| format!("{e:?}"))?;
                let running = tree.iter().filter(|r| r.parent_run_id.is_some() && !r.status.is_terminal()).count();
                Ok(match running {
                    0 => LoopEvaluation::Stop,
                    n => LoopEvaluation::Continue(Some(format!(
                        "{n} background task(s) started in this run are still running; wait for them before finishing."
                    ))),
                })
            }
            kind => match self.evaluators.get(kind) {
                Some(evaluator) => evaluator.evaluate(criterion, context).await,
                None => Err(format!("no evaluator is registered for '{kind}'")),
            },
        }
    }

    async fn judge(&self, criterion: &LoopCriterion, context: &LoopContext<'_>) -> Result<LoopEvaluation, String> {
        let judge = self.judge.as_ref().ok_or("no judge binding is configured")?;
        let mut system = String::from(
            "You judge whether an agent's work is finished. Answer with DONE on the first line when it is; \
             otherwise answer CONTINUE on the first line and, on the next lines, what is still missing.",
        );
        if let Some(extra) = criterion.judge_instructions.as_deref().filter(|t| !t.trim().is_empty()) {
            system.push_str("\n\n");
            system.push_str(extra);
        }
        let criteria = criterion.judge_criteria.as_deref().unwrap_or_default();
        let request = ModelRequest {
            system: Some(system),
            messages: vec![Message::user(format!(
                "Finished means: {criteria}\n\nThe agent's latest answer:\n{}",
                context.last_text
            ))],
            ..ModelRequest::from_binding(&crate::definition::ModelBinding {
                provider: judge.provider.name().to_owned(),
                model: judge.model.clone(),
                ..Default::default()
            })
        };
        let mut stream = judge.provider.stream(&request).await.map_err(|e| format!("{:?}", e.kind))?;
        let mut verdict = String::new();
        while let Some(event) = stream.next().await {
            if let ModelEvent::TextDelta(t) = event.map_err(|e| format!("{:?}", e.kind))? {
                verdict.push_str(&t);
            }
        }
        let verdict = verdict.trim();
        let (first, rest) = verdict.split_once('\n').unwrap_or((verdict, ""));
        match first.trim().to_ascii_uppercase().as_str() {
            v if v.starts_with("DONE") => Ok(LoopEvaluation::Stop),
            v if v.starts_with("CONTINUE") => {
                Ok(LoopEvaluation::Continue(Some(rest.trim()).filter(|r| !r.is_empty()).map(str::to_owned)))
            }
            _ => Err("the judge answered neither DONE nor CONTINUE".into()),
        }
    }
}

/// The open items of the latest task list the agent wrote (`- [ ]`, and `- [~]` with mode
/// `inProgress`): none left (or no list at all) stops the loop.
fn todo_completion(criterion: &LoopCriterion, messages: &[Message]) -> LoopEvaluation {
    let modes = criterion.modes.clone().unwrap_or_else(|| vec!["unchecked".into()]);
    let open_marks: Vec<&str> = modes
        .iter()
        .filter_map(|m| match m.as_str() {
            "unchecked" => Some("[ ]"),
            "inProgress" => Some("[~]"),
            _ => None,
        })
        .collect();
    let latest = messages.iter().rev().find_map(|m| match m {
        Message::Assistant { text: Some(t), .. } if t.lines().any(is_task) => Some(t.as_str()),
        _ => None,
    });
    let open: Vec<&str> = latest
        .map(|t| {
            t.lines()
                .filter(|l| is_task(l))
                .filter(|l| open_marks.iter().any(|m| l.trim_start()[2..].starts_with(m)))
                .map(|l| l.trim())
                .collect()
        })
        .unwrap_or_default();
    if open.is_empty() {
        LoopEvaluation::Stop
    } else {
        LoopEvaluation::Continue(Some(format!("These items are still open:\n{}", open.join("\n"))))
    }
}

/// A markdown task-list line: `- [ ]`, `- [x]`, `- [~]` (or with `*`).
fn is_task(line: &str) -> bool {
    let l = line.trim_start();
    (l.starts_with("- [") || l.starts_with("* [")) && l.len() >= 5 && &l[4..5] == "]"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn criterion(kind: &str) -> LoopCriterion {
        LoopCriterion { kind: kind.into(), marker: None, modes: None, judge_criteria: None, judge_instructions: None }
    }

    #[test]
    fn todo_completion_reads_the_latest_task_list_and_its_open_items() {
        let said = |t: &str| Message::Assistant { text: Some(t.into()), tool_calls: Vec::new(), reasoning: Vec::new() };
        let open = vec![said("Plan:\n- [x] find\n- [ ] fix\n- [~] test")];
        assert_eq!(
            todo_completion(&criterion("todoCompletion"), &open),
            LoopEvaluation::Continue(Some("These items are still open:\n- [ ] fix".into()))
        );
        let both =
            LoopCriterion { modes: Some(vec!["unchecked".into(), "inProgress".into()]), ..criterion("todoCompletion") };
        assert!(matches!(todo_completion(&both, &open), LoopEvaluation::Continue(Some(t)) if t.contains("[~] test")));
        let done = [open.clone(), vec![said("- [x] find\n- [x] fix\n- [x] test"), said("All good.")]].concat();
        assert_eq!(todo_completion(&criterion("todoCompletion"), &done), LoopEvaluation::Stop);
        assert_eq!(todo_completion(&criterion("todoCompletion"), &[said("no list")]), LoopEvaluation::Stop);
    }
}
