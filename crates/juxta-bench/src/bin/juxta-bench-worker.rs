//! The worker process of the soak and chaos scenarios, for the tests of
//! this crate (which have no `juxta` binary at hand); `juxta soak-worker`
//! runs the same code. Usage: `juxta-bench-worker soak-worker <spec JSON>`.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.as_slice() {
        [_, cmd, json] if cmd == juxta_bench::worker::SUBCOMMAND => {
            juxta_bench::worker::main_json(json)
        }
        _ => {
            eprintln!(
                "usage: juxta-bench-worker {} <spec JSON>",
                juxta_bench::worker::SUBCOMMAND
            );
            std::process::ExitCode::FAILURE
        }
    }
}
