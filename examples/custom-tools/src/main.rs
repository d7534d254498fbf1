//! `custom-tools`: the `mcp-tasks` service with one tool of our own, `archive_files`, and
//! none of the built-in packs. Run `custom-tools dev` for everything in one process, or
//! `custom-tools serve` and `custom-tools worker` as separate processes; every flag and
//! environment variable of `mcp-tasks` works the same.

mod archive;

fn main() -> std::process::ExitCode {
    let archive = match archive::tool() {
        Ok(tool) => tool,
        Err(e) => {
            eprintln!("custom-tools: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    mcp_tasks::App::new()
        .default_packs("none")
        .tool(archive)
        .run()
}
