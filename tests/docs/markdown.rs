//! The fenced blocks of a Markdown page and the commands a ```console
//! block shows, each with the output the page says it prints.

/// A fenced block: where it starts, its info string, the HTML comment
/// just above it (if any) and its lines.
#[derive(Debug)]
pub struct Block {
    /// 1-based line of the opening fence.
    pub line: usize,
    /// What follows the opening ``` (`console`, `sh`, or nothing).
    pub info: String,
    /// The `<!-- ... -->` on the last non-blank line before the fence.
    pub marker: Marker,
    /// The lines between the fences, the fence's indentation removed.
    pub body: Vec<String>,
}

impl Block {
    /// Whether the block shows something a reader runs or installs: a
    /// `$ ` line, a command line (gpufree, sudo, cargo, python3, a script
    /// of the repository), or a setting that runs gpufree (`Key=...gpufree`).
    pub fn shows_commands(&self) -> bool {
        self.body.iter().any(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("$ ").unwrap_or(l);
            let first = l.split_whitespace().next().unwrap_or("");
            matches!(first, "gpufree" | "sudo" | "cargo" | "python3")
                || first.ends_with("/gpufree")
                || first.starts_with("scripts/")
                || (l.contains('=') && l.contains("/gpufree"))
                || l.starts_with("$ ")
        })
    }
}

/// What the `<!-- ... -->` just above a block says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// `<!-- not tested: reason -->`: not run, with the reason (empty
    /// when none was given).
    NotTested(String),
    /// `<!-- tested: excerpt of PATH -->`: each line shown, comments
    /// aside, is a line of that file of the repository.
    ExcerptOf(String),
    /// `<!-- tested: one command ... -->`: one command and its output,
    /// whose output may itself hold `$ ` lines (the demo's narration).
    OneCommand,
    /// Any other comment, or none.
    Other,
}

impl Marker {
    /// The marker a comment line is.
    fn parse(comment: &str) -> Marker {
        let inner = |rest: &str| rest.trim_end_matches("-->").trim().to_owned();
        if let Some(reason) = comment.strip_prefix("<!-- not tested:") {
            Marker::NotTested(inner(reason))
        } else if let Some(path) = comment.strip_prefix("<!-- tested: excerpt of ") {
            Marker::ExcerptOf(inner(path))
        } else if comment.starts_with("<!-- tested: one command") {
            Marker::OneCommand
        } else {
            Marker::Other
        }
    }
}

/// One command of a ```console block and the output shown below it.
#[derive(Debug)]
pub struct Step {
    /// 1-based line of the `$ ` line.
    pub line: usize,
    /// The command, without `$ `.
    pub command: String,
    /// The lines shown below it, up to the next command.
    pub expected: String,
}

/// Every fenced block of `text`.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(Block, usize)> = None;
    let mut last_nonblank: Option<&str> = None;
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        if let Some(fence) = trimmed.strip_prefix("```") {
            match open.take() {
                Some((block, _)) => out.push(block),
                None => {
                    let marker = last_nonblank
                        .map(str::trim)
                        .filter(|l| l.starts_with("<!--"))
                        .map_or(Marker::Other, Marker::parse);
                    let info = fence.trim().to_owned();
                    let block = Block {
                        line: i + 1,
                        info,
                        marker,
                        body: Vec::new(),
                    };
                    open = Some((block, indent));
                }
            }
        } else if let Some((block, indent)) = open.as_mut() {
            let cut = raw
                .char_indices()
                .nth(*indent)
                .map_or(raw.len(), |(n, _)| n);
            let cut = if raw[..cut].trim().is_empty() { cut } else { 0 };
            block.body.push(raw[cut..].to_owned());
        }
        if !raw.trim().is_empty() {
            last_nonblank = Some(raw);
        }
    }
    out
}

/// The commands of a ```console block, each with its expected output.
pub fn steps(block: &Block) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for (i, l) in block.body.iter().enumerate() {
        let line = block.line + 1 + i;
        match l.strip_prefix("$ ") {
            Some(command) if out.is_empty() || block.marker != Marker::OneCommand => {
                out.push(Step {
                    line,
                    command: command.to_owned(),
                    expected: String::new(),
                })
            }
            _ => match out.last_mut() {
                Some(step) => {
                    step.expected.push_str(l);
                    step.expected.push('\n');
                }
                None => panic!("line {line}: output before any `$ ` command"),
            },
        }
    }
    out
}
