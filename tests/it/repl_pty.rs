//! The SQL shell at a real pseudo-terminal (rexpect): multi-line input,
//! Ctrl-C cancelling a streaming query, an error then recovery, history kept
//! across two sessions. Input is sent only after a prompt shows: the line
//! editor discards what was typed before it switched the terminal mode.

use std::path::Path;
use std::process::Command;

use rexpect::session::{PtySession, spawn_command};

const PROMPT: &str = "weir> ";
const CONTINUATION: &str = "   -> ";

/// `weir` at a terminal with its history in `history`.
fn shell(history: &Path) -> PtySession {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TZ", "UTC")
        .env("TERM", "xterm")
        .env("WEIR_HISTORY", history);
    let mut session = spawn_command(command, Some(30_000)).expect("spawn weir in a pty");
    session.exp_string("Type HELP;").expect("welcome line");
    session.exp_string(PROMPT).expect("first prompt");
    session
}

fn quit(mut session: PtySession) {
    session.send_line("QUIT;").unwrap();
    session.exp_eof().expect("the shell exits on QUIT");
}

#[test]
fn a_statement_typed_over_several_lines_runs_at_its_semicolon() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = shell(&dir.path().join("history"));
    session.send_line("SELECT 40 +").unwrap();
    session.exp_string(CONTINUATION).unwrap();
    session.send_line("2 AS answer").unwrap();
    session.exp_string(CONTINUATION).unwrap();
    session.send_line(";").unwrap();
    let output = session.exp_string("1 row in set").unwrap();
    assert!(output.contains("answer"), "{output}");
    assert!(output.contains("42"), "{output}");
    // Two statements on one line both run.
    session.exp_string(PROMPT).unwrap();
    session
        .send_line("SELECT 'first' AS a; SELECT 'second' AS b;")
        .unwrap();
    session.exp_string("first").unwrap();
    session.exp_string("second").unwrap();
    session.exp_string(PROMPT).unwrap();
    quit(session);
}

#[test]
fn ctrl_c_cancels_a_streaming_query_and_the_shell_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = shell(&dir.path().join("history"));
    session
        .send_line(
            "CREATE TABLE ticks (n BIGINT) WITH ('connector' = 'datagen', \
             'rows-per-second' = '20', 'fields.n.kind' = 'sequence', \
             'fields.n.start' = '1', 'fields.n.end' = '1000000000');",
        )
        .unwrap();
    session.exp_string("[INFO] Execute statement succeeded.").unwrap();
    session.exp_string(PROMPT).unwrap();
    session.send_line("SELECT n FROM ticks;").unwrap();
    // Rows stream in (Flink's tableau, with the change kind first).
    session.exp_regex(r"\| +op \| +n \|").unwrap();
    session.exp_regex(r"\| +\+I \| +3 \|").unwrap();
    session.send_control('c').unwrap();
    let output = session.exp_string("cancelled").unwrap();
    assert!(output.contains("in set"), "{output}");
    session.exp_string(PROMPT).unwrap();
    // The shell is alive and the job is no longer running.
    session.send_line("SHOW JOBS;").unwrap();
    let jobs = session.exp_string("in set").unwrap();
    assert!(!jobs.contains("RUNNING"), "{jobs}");
    session.exp_string(PROMPT).unwrap();
    // Ctrl-C at the prompt drops the half-typed statement, not the shell.
    session.send_line("SELECT 'dropped'").unwrap();
    session.exp_string(CONTINUATION).unwrap();
    session.send_control('c').unwrap();
    session.exp_string(PROMPT).unwrap();
    session.send_line("SELECT 'kept' AS k;").unwrap();
    let output = session.exp_string("1 row in set").unwrap();
    assert!(
        output.contains("kept") && !output.contains("| dropped"),
        "{output}"
    );
    session.exp_string(PROMPT).unwrap();
    quit(session);
}

#[test]
fn an_error_prints_a_caret_and_the_next_statement_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = shell(&dir.path().join("history"));
    session
        .send_line("SELECT nope FROM (VALUES (1)) AS t(a);")
        .unwrap();
    session.exp_string("[ERROR]").unwrap();
    session.exp_string("nope").unwrap();
    session.exp_string("^").unwrap();
    session.exp_string(PROMPT).unwrap();
    session.send_line("SELEC 1;").unwrap();
    session.exp_string("[ERROR]").unwrap();
    session.exp_string(PROMPT).unwrap();
    session
        .send_line("SELECT a + 1 AS b FROM (VALUES (1)) AS t(a);")
        .unwrap();
    let output = session.exp_string("1 row in set").unwrap();
    assert!(output.contains(" 2 "), "{output}");
    session.exp_string(PROMPT).unwrap();
    quit(session);
}

#[test]
fn history_is_kept_across_two_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history");
    let mut first = shell(&history);
    first.send_line("SELECT 'remembered' AS word;").unwrap();
    first.exp_string("1 row in set").unwrap();
    first.exp_string(PROMPT).unwrap();
    quit(first);
    let saved = std::fs::read_to_string(&history).unwrap();
    assert!(saved.contains("SELECT 'remembered' AS word;"), "{saved}");

    let mut second = shell(&history);
    // Up arrow brings back the last statement of the earlier session (QUIT;
    // is the last entry, so press it twice).
    second.send("\x1b[A").unwrap();
    second.send("\x1b[A").unwrap();
    second.flush().unwrap();
    second.exp_string("SELECT 'remembered' AS word;").unwrap();
    second.send_line("").unwrap();
    let output = second.exp_string("1 row in set").unwrap();
    assert!(output.contains("| remembered |"), "{output}");
    second.exp_string(PROMPT).unwrap();
    quit(second);
}

#[test]
fn pasted_lines_all_run_whether_plain_or_bracketed() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = shell(&dir.path().join("history"));
    // Several lines in one write, as a terminal without bracketed paste
    // delivers a paste: two statements, then one over three lines.
    session
        .send("SELECT 'one' AS a;\rSELECT 'two' AS b;\rSELECT 'three'\r  AS c\r;\r")
        .unwrap();
    session.flush().unwrap();
    session.exp_string("| one |").unwrap();
    session.exp_string("| two |").unwrap();
    let output = session.exp_string("| three |").unwrap();
    assert!(!output.contains("[ERROR]"), "{output}");
    session.exp_string("1 row in set").unwrap();
    session.exp_string(PROMPT).unwrap();
    // A bracketed paste (what xterm sends once the editor enables it): the
    // statements run at the Enter after it.
    session
        .send("\x1b[200~SELECT 'four' AS d;\nSELECT 'five'\n  AS e;\x1b[201~\r")
        .unwrap();
    session.flush().unwrap();
    session.exp_string("| four |").unwrap();
    let output = session.exp_string("| five |").unwrap();
    assert!(!output.contains("[ERROR]"), "{output}");
    session.exp_string("1 row in set").unwrap();
    session.exp_string(PROMPT).unwrap();
    quit(session);
}
