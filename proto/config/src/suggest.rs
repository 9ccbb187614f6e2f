//! The nearest known name to a misspelt one: Levenshtein distance over
//! bytes, accepted when small next to the name's length.

use crate::table::Var;

/// The edit distance (insertions, deletions, substitutions) between `a`
/// and `b`, over bytes.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The known variable nearest to `name`, if one is close enough: at most
/// one edit per 4 bytes of the part after `HLOBRIDGE_`, and at most 3 (so
/// that `HLOBRIDGE_FOO` suggests nothing rather than `HLOBRIDGE_ZOO`). Ties
/// go to the earlier entry of the table.
pub fn nearest(name: &str) -> Option<Var> {
    let tail = name.strip_prefix(crate::PREFIX).unwrap_or(name);
    let limit = (tail.len() / 4).min(3);
    Var::ALL
        .iter()
        .map(|&v| (levenshtein(name, v.name()), v))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, v)| v)
}
