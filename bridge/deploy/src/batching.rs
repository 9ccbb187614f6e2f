//! Host-side tensor plumbing along a batch dimension: concatenating several
//! requests' inputs, padding to a compiled bucket size, and slicing the
//! results back. Dense row-major bytes; no element is interpreted.

/// Bytes before (`outer`: how many slabs) and per batch row (`row`) of a
/// dense tensor of `shape` with `esize`-byte elements along dim `bd`.
fn split_dims(shape: &[i64], bd: usize, esize: usize) -> (usize, usize) {
    let outer: usize = shape[..bd].iter().map(|&d| d as usize).product();
    let row: usize = shape[bd + 1..]
        .iter()
        .map(|&d| d as usize)
        .product::<usize>()
        * esize;
    (outer, row)
}

/// Concatenates `parts` (each `(data, batch)`, all with the same dims
/// except `bd`, given by `shape` with any value at `bd`) along `bd` and pads
/// with zeros up to `total` rows.
pub fn concat_pad(
    parts: &[(&[u8], i64)],
    shape: &[i64],
    bd: usize,
    esize: usize,
    total: i64,
) -> Vec<u8> {
    let (outer, row) = split_dims(shape, bd, esize);
    let mut out = Vec::with_capacity(outer * row * total as usize);
    for o in 0..outer {
        let mut rows = 0i64;
        for (data, b) in parts {
            let n = *b as usize * row;
            out.extend_from_slice(&data[o * n..(o + 1) * n]);
            rows += b;
        }
        out.resize(out.len() + (total - rows).max(0) as usize * row, 0);
    }
    out
}

/// Rows `[start, start + len)` along `bd` of a dense tensor of `shape`.
pub fn slice_rows(
    data: &[u8],
    shape: &[i64],
    bd: usize,
    esize: usize,
    start: i64,
    len: i64,
) -> Vec<u8> {
    let (outer, row) = split_dims(shape, bd, esize);
    let total = shape[bd] as usize;
    let mut out = Vec::with_capacity(outer * row * len as usize);
    for o in 0..outer {
        let base = o * total * row;
        out.extend_from_slice(
            &data[base + start as usize * row..base + (start + len) as usize * row],
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_then_slice_round_trips_on_inner_batch_dim() {
        // shape [2, b, 3] with 1-byte elements, batch dim 1.
        let a: Vec<u8> = (0..6).collect(); // 2 x 1 x 3
        let b: Vec<u8> = (100..100 + 2 * 2 * 3).collect();
        let cat = concat_pad(&[(&a, 1), (&b, 2)], &[2, 0, 3], 1, 1, 4);
        assert_eq!(cat.len(), 2 * 4 * 3);
        let full = [2, 4, 3];
        assert_eq!(slice_rows(&cat, &full, 1, 1, 0, 1), a);
        assert_eq!(slice_rows(&cat, &full, 1, 1, 1, 2), b);
        assert_eq!(slice_rows(&cat, &full, 1, 1, 3, 1), vec![0u8; 6]);
    }
}
