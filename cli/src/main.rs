//! The `spex` binary: the command line (see the library).

fn main() -> std::process::ExitCode {
    spex::main()
}
