//! Output while a bench runs: result lines on stdout, a progress bar on
//! stderr only when stderr is a terminal (so logs and pipes stay clean).

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};

pub(crate) struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar counting `total_secs` seconds of planned run time.
    pub(crate) fn new(total_secs: u64) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::new(total_secs);
        let style = ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len}s {msg}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Progress { bar: Some(bar) }
    }

    /// A line on stdout (the bar steps aside while it is written). Write
    /// errors (a closed pipe) are ignored rather than panicking.
    pub(crate) fn println(&self, line: &str) {
        let write = || {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        };
        match &self.bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }

    /// A line on stderr (warnings, skipped cases).
    pub(crate) fn eprintln(&self, line: &str) {
        let write = || {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        };
        match &self.bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }

    pub(crate) fn message(&self, msg: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(msg.to_string());
        }
    }

    /// One planned second has passed.
    pub(crate) fn tick(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
