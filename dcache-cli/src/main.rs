//! The `dcache` binary: `bench`, `format`, `layout` and `mount` over the
//! dcache crates.

#[cfg(not(loom))]
mod cli;
#[cfg(not(loom))]
mod format;
#[cfg(not(loom))]
mod mount;

#[cfg(not(loom))]
fn main() {
    std::process::exit(cli::main(std::env::args_os()));
}

/// Built with `--cfg loom` only for the model-checking tests: the CLI's
/// threads and atomics would be loom's, which only run inside a model.
#[cfg(loom)]
fn main() {
    eprintln!("dcache: this build is for loom tests; rebuild without --cfg loom");
    std::process::exit(2);
}
