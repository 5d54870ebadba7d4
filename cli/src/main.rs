//! The `spex` binary: the command line (see the library).

/// The sweep allocates and frees on every simulated operation; mimalloc judges its images
/// faster than the system allocator (see `spex_alloc`).
#[global_allocator]
static ALLOCATOR: spex_alloc::Mimalloc = spex_alloc::Mimalloc;

fn main() -> std::process::ExitCode {
    spex::main()
}
