//! The README's counts of what the verification has, read from the code rather than typed: the
//! mutants the sweeps must catch and those only concurrency exposes.

use spex_engine::mutant::Mutant;

#[test]
fn the_readme_counts_the_mutants_the_code_has() {
    let readme = include_str!("../../../README.md");
    let (sweep, loom) = (Mutant::ALL.len(), Mutant::CONCURRENCY.len());
    for claim in [
        format!("{sweep} mutants (and {loom} concurrency mutants for loom)"),
        format!("{sweep}\n  deliberately broken engines (plus {loom} only concurrency exposes"),
    ] {
        assert!(readme.contains(&claim), "the README should say {claim:?}");
    }
    // No other count of them anywhere: every number before "mutants" is the code's.
    for (at, _) in readme.match_indices(" mutants") {
        let digits: String = readme[..at]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if !digits.is_empty() {
            assert_eq!(digits.parse::<usize>().unwrap(), sweep, "the README says {digits} mutants");
        }
    }
}
