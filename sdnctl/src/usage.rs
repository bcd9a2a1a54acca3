//! What sdnctl says about a command line it cannot take: clap's errors put in sdnctl's words
//! ("usage: sdnctl create NAME [--global]", "--force does not apply to join") and the nearest
//! command to a mistyped one.

use crate::{Cli, SHAPES};

/// The command closest to a mistyped `word` (edit distance at most 2, or a unique prefix).
fn nearest_command(word: &str) -> Option<String> {
    use clap::CommandFactory;
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let prefixed: Vec<&String> = names
        .iter()
        .filter(|n| !word.is_empty() && n.starts_with(word))
        .collect();
    if let [one] = prefixed.as_slice() {
        return Some((*one).clone());
    }
    names
        .iter()
        .map(|n| (edit_distance(word, n), n))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n.clone())
}

/// Levenshtein distance, with a swap of two neighbours counted as one edit (`stauts`).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// A clap error in sdnctl's words: which command's shape was wrong, which flag belongs to
/// another command, which command does not exist.
pub(crate) fn usage_error(raw: &[String], e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let word = raw.iter().find_map(|w| {
        SHAPES
            .iter()
            .find(|(c, _)| c == w)
            .map(|(c, shape)| (*c, *shape))
    });
    let invalid = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.split_whitespace().next().unwrap_or("").to_string(),
        _ => String::new(),
    };
    match (e.kind(), word) {
        (ErrorKind::InvalidSubcommand, _) => {
            let word = match e.get(ContextKind::InvalidSubcommand) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => invalid,
            };
            match nearest_command(&word) {
                Some(near) => format!("unknown command {word:?}; did you mean {near:?}?"),
                None => format!("unknown command {word:?}"),
            }
        }
        (ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand, _) => {
            "no command given".into()
        }
        (ErrorKind::UnknownArgument, Some((cmd, _)))
            if ["--global", "--force"].contains(&invalid.as_str()) =>
        {
            format!("{invalid} does not apply to {cmd}")
        }
        (ErrorKind::UnknownArgument, _) if invalid.starts_with('-') => {
            format!("unknown option {invalid:?}")
        }
        (
            ErrorKind::MissingRequiredArgument
            | ErrorKind::UnknownArgument
            | ErrorKind::TooManyValues,
            Some((cmd, shape)),
        ) => format!("usage: sdnctl {cmd} {shape}")
            .trim_end()
            .to_string(),
        (ErrorKind::InvalidValue, _) if !invalid.is_empty() => {
            match (
                e.get(ContextKind::InvalidValue),
                e.get(ContextKind::ValidValue),
            ) {
                (Some(ContextValue::String(v)), Some(ContextValue::Strings(valid)))
                    if !v.is_empty() =>
                {
                    format!(
                        "bad value {v:?} for {}: expected {}",
                        invalid
                            .trim_start_matches('<')
                            .trim_end_matches('>')
                            .to_lowercase(),
                        valid.join(" or ")
                    )
                }
                _ => format!("{invalid} needs a value"),
            }
        }
        _ => e
            .render()
            .to_string()
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ")
            .to_string(),
    }
}
