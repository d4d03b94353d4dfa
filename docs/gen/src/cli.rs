//! A command-line reference from clap's own model of the command: each command's `--help`, as a
//! user with a 100-column terminal sees it.

use clap::Command;

/// Width the help texts are wrapped at.
const WIDTH: usize = 100;

/// `command` and every visible subcommand below it, each under a heading of its full name.
/// Environment variables are named without their values, so the page does not depend on the
/// environment it is generated in (`RUST_LOG`, `EDGECACHE_NODE_NAME`).
pub fn help_pages(command: Command) -> String {
    let mut command = without_env_values(command)
        .term_width(WIDTH)
        .max_term_width(WIDTH);
    command.build();
    let mut out = String::new();
    write_command(&mut command, "", &mut out);
    out
}

/// `command` with every argument's environment value hidden, in every subcommand too.
fn without_env_values(command: Command) -> Command {
    let command = command.mut_args(|a| a.hide_env_values(true));
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names.iter().fold(command, |c, name| {
        c.mut_subcommand(name, without_env_values)
    })
}

fn write_command(command: &mut Command, parent: &str, out: &mut String) {
    let name = if parent.is_empty() {
        command.get_name().to_string()
    } else {
        format!("{parent} {}", command.get_name())
    };
    let help = command.render_long_help().to_string();
    out.push_str(&format!(
        "## `{name}`\n\n```text\n{}\n```\n\n",
        help.trim_end()
    ));
    for sub in command.get_subcommands_mut() {
        if !sub.is_hide_set() && sub.get_name() != "help" {
            write_command(sub, &name, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{Arg, Command};

    use super::help_pages;

    #[test]
    fn pages_name_environment_variables_without_their_values() {
        // PATH is set wherever the test runs.
        let cli = Command::new("tool")
            .subcommand(Command::new("run").arg(Arg::new("path").long("path").env("PATH")));
        let text = help_pages(cli);
        assert!(text.contains("## `tool run`"), "{text}");
        assert!(text.contains("[env: PATH]"), "{text}");
        assert!(!text.contains("PATH="), "{text}");
    }
}
