fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "send".into());
    let depth2 = std::env::args().nth(2).is_some();
    let mut options = spex_verification::sweep::Options::full(1);
    options.scenarios = spex_verification::sweep::scenario::all()
        .into_iter()
        .filter(|s| name == "all" || s.name == name)
        .collect();
    options.depth2 = depth2;
    let report = spex_verification::sweep::sweep(&options, &mut |_| {});
    println!(
        "points {} images {} violations {} in {:?}",
        report.crash_points,
        report.images,
        report.violations.len(),
        report.elapsed
    );
    for v in report.violations.iter().take(8) {
        println!("{} {} {}: {:?}", v.token, v.transition, v.boundary, v.messages);
    }
}
