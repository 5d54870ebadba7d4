//! The mutant catalogue, once: every deliberately broken engine is caught by the default
//! (depth-2) sweep. The longest test: the `ci` nextest profile runs it (`.ci/run`), the default
//! profile (the README's test command) leaves it out. `spex verify mutants` is the same sweep
//! from the command line, in a build with the `mutants` feature.

use spex_engine::mutant::Mutant;
use spex_verification::seed;
use spex_verification::sweep::{self, Options};

#[test]
fn every_mutant_is_caught_by_the_default_sweep() {
    let seed = seed::resolve(None).expect("SPEX_SEED, when set, is a u64");
    println!("seed {seed}");
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let results = sweep::catch_each(&Mutant::ALL, &Options::full(seed), workers, &|caught| {
        let verdict = if caught.first.is_some() { "caught" } else { "NOT CAUGHT" };
        println!("{} {verdict} after {} images", caught.mutant.name(), caught.images);
    });
    assert_eq!(results.len(), Mutant::ALL.len(), "one verdict per mutant");
    let missed: Vec<String> = results
        .iter()
        .filter(|caught| caught.first.is_none())
        .map(|caught| caught.mutant.name())
        .collect();
    assert!(
        missed.is_empty(),
        "mutants not caught by the sweep: {}; replay: cargo run -p spex --features mutants -- \
         verify mutants --seed {seed} --mutant NAME",
        missed.join(", ")
    );
}
