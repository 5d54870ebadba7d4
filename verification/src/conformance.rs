//! Conformance: a sequence of steps run against the engine and the model side by side, with the
//! engine's public state compared to the model's after every step. Property tests feed it
//! random sequences (see `tests/it/conformance.rs`); a failing sequence shrinks to a minimal one.

use faultfs::Fs;
use spex_engine::Store;

use crate::sweep::check;
use crate::sweep::run::{self, Execution};
use crate::sweep::scenario::Step;

/// Runs `steps` on `store`, checking the engine against the model after every step. Returns
/// the first disagreement, naming the step.
pub fn conform<F: Fs>(store: &Store<F>, steps: &[Step]) -> Result<(), String> {
    let mut execution = Execution::default();
    for (index, step) in steps.iter().enumerate() {
        run::begin(&mut execution, step);
        let mut delivered = Vec::new();
        let mut violations = Vec::new();
        let answer = run::perform(store, step, &mut delivered, &mut violations, None)
            .map_err(|error| format!("step {index} {step:?}: the engine failed: {error}"))?;
        execution.delivered.extend(delivered);
        run::advance(&mut execution, step, &answer);
        violations.append(&mut execution.violations);
        if !violations.is_empty() {
            return Err(format!("step {index} {step:?}: {}", violations.join("; ")));
        }
        let observed = check::project(store, &execution)
            .map_err(|error| format!("step {index} {step:?}: {error}"))?;
        if !execution.model.admits(&observed) {
            return Err(format!(
                "step {index} {step:?}: the engine's public state differs from the model's\n  engine: {observed:?}\n  model:  {:?}",
                execution.model
            ));
        }
    }
    Ok(())
}
