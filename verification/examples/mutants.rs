fn main() {
    let options = spex_verification::sweep::Options::full(1);
    for mutant in spex_engine::mutant::Mutant::ALL {
        let caught = spex_verification::sweep::catch(mutant, &options);
        match &caught.first {
            Some(v) => println!(
                "{:<32} caught in {:>8.1?} after {:>6} images: {} {} {:?}",
                mutant.name(),
                caught.elapsed,
                caught.images,
                v.token,
                v.boundary,
                v.messages.first()
            ),
            None => println!(
                "{:<32} NOT CAUGHT ({:?}, {} images)",
                mutant.name(),
                caught.elapsed,
                caught.images
            ),
        }
    }
}
