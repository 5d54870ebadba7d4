//! The `spex` binary: the command line (see the library).

/// The sweep allocates and frees on every simulated operation; mimalloc judges its images
/// faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    spex::main()
}
