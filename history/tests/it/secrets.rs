//! Redaction against the shared corpus of secret shapes (`tests/data/secrets.tsv`): every shape is
//! redacted whole, and no window cut from a redacted text (a snippet, a title) holds any part of
//! a secret, wherever the window starts.

use spex_history::{Identity, redact};

/// One planted secret: its label, the text it sits in, and the part no surface may show.
struct Planted {
    label: String,
    text: String,
    secret: String,
}

fn corpus() -> Vec<Planted> {
    let file = include_str!("../data/secrets.tsv");
    file.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 3, "{line}");
            Planted {
                label: fields[0].to_owned(),
                text: fields[1].replace("\\n", "\n"),
                secret: fields[2].replace("\\n", "\n"),
            }
        })
        .collect()
}

/// The first run of 8 characters of `secret` that `shown` holds, if any.
fn leak<'a>(shown: &str, secret: &'a str) -> Option<&'a str> {
    let chars: Vec<(usize, char)> = secret.char_indices().collect();
    (0..chars.len().saturating_sub(7)).find_map(|at| {
        let end = chars.get(at + 8).map_or(secret.len(), |(end, _)| *end);
        let window = &secret[chars[at].0..end];
        shown.contains(window).then_some(window)
    })
}

#[test]
fn the_published_rules_all_load() {
    let (rules, broken) = spex_history::redact::rule_counts();
    assert!(rules >= 220, "the gitleaks rules and spex's own: {rules}");
    assert_eq!(broken, 0, "every rule compiles");
}

#[test]
fn every_secret_shape_is_redacted_whole() {
    let corpus = corpus();
    assert!(corpus.len() >= 40, "at least 40 shapes: {}", corpus.len());
    let me = Identity::new(Some("/home/ada"), Some("ada"), Some("lovelace-laptop"));
    for planted in &corpus {
        let shown = redact(&planted.text, &me);
        assert!(
            leak(&shown, &planted.secret).is_none(),
            "{}: {:?} -> {shown:?}",
            planted.label,
            planted.text
        );
        assert!(shown.contains("[redacted:") || shown.contains("[withheld:"), "{shown}");
    }
}

#[test]
fn a_window_cut_after_redaction_never_shows_part_of_a_secret() {
    let me = Identity::default();
    for planted in corpus() {
        let text = format!("before the secret {} and after it", planted.text);
        let shown = redact(&text, &me);
        // Windows starting at every character of the redacted text, of a snippet's width.
        for (at, _) in shown.char_indices() {
            let window: String = shown[at..].chars().take(64).collect();
            assert!(leak(&window, &planted.secret).is_none(), "{}: {window:?}", planted.label);
        }
    }
}
