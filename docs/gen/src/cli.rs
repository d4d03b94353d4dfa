//! A command-line reference from clap's own model of the command: each command's `--help`, as a
//! user with a 100-column terminal sees it.

use clap::Command;

/// Width the help texts are wrapped at.
const WIDTH: usize = 100;

/// `command` and every visible subcommand below it, each under a heading of its full name.
pub fn help_pages(command: Command) -> String {
    let mut command = command.term_width(WIDTH).max_term_width(WIDTH);
    command.build();
    let mut out = String::new();
    write_command(&mut command, "", &mut out);
    out
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
