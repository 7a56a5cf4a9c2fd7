//! C2SP `tlog-tiles` resources (PROTOCOL.md §15.3): the paths of hash tiles
//! (`tile/<L>/<N>[.p/<W>]`) and entry bundles (`tile/entries/<N>[.p/<W>]`),
//! which hashes and entries each holds, and the bundle encoding (big-endian
//! uint16 length before each entry).

use super::{TILE_HEIGHT, TILE_WIDTH};

/// A tile or entry bundle, as its path names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TilePath {
    /// `None` for an entry bundle.
    pub level: Option<u8>,
    pub index: u64,
    /// 1..=256; 256 is a full tile (no `.p/` suffix).
    pub width: u16,
}

/// Why a path names no tile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a tile path")]
pub struct BadTilePath;

impl TilePath {
    pub fn hashes(level: u8, index: u64, width: u16) -> TilePath {
        TilePath {
            level: Some(level),
            index,
            width,
        }
    }

    pub fn entries(index: u64, width: u16) -> TilePath {
        TilePath {
            level: None,
            index,
            width,
        }
    }

    pub fn is_full(&self) -> bool {
        u64::from(self.width) == TILE_WIDTH
    }

    /// The path below the log's prefix, e.g. `tile/0/x001/234.p/7`.
    pub fn path(&self) -> String {
        let mut n = self.index;
        let mut digits = format!("{:03}", n % 1000);
        while n >= 1000 {
            n /= 1000;
            digits = format!("x{:03}/{digits}", n % 1000);
        }
        let level = match self.level {
            Some(l) => l.to_string(),
            None => "entries".to_owned(),
        };
        let partial = if self.is_full() {
            String::new()
        } else {
            format!(".p/{}", self.width)
        };
        format!("tile/{level}/{digits}{partial}")
    }

    /// Reads a path below the prefix, refusing any other spelling of it.
    pub fn parse(path: &str) -> Result<TilePath, BadTilePath> {
        if path.len() > 64 {
            return Err(BadTilePath);
        }
        let rest = path.strip_prefix("tile/").ok_or(BadTilePath)?;
        let (level, rest) = rest.split_once('/').ok_or(BadTilePath)?;
        let level = match level {
            "entries" => None,
            l => Some(canonical_number(l, 63)? as u8),
        };
        let (digits, width) = match rest.split_once(".p/") {
            Some((d, w)) => (d, canonical_number(w, TILE_WIDTH - 1)? as u16),
            None => (rest, TILE_WIDTH as u16),
        };
        if width == 0 {
            return Err(BadTilePath);
        }
        let parts: Vec<&str> = digits.split('/').collect();
        let mut index: u64 = 0;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let d = if last {
                *part
            } else {
                part.strip_prefix('x').ok_or(BadTilePath)?
            };
            if d.len() != 3 || !d.bytes().all(|b| b.is_ascii_digit()) {
                return Err(BadTilePath);
            }
            let v: u64 = d.parse().map_err(|_| BadTilePath)?;
            index = index
                .checked_mul(1000)
                .and_then(|x| x.checked_add(v))
                .ok_or(BadTilePath)?;
        }
        let t = TilePath {
            level,
            index,
            width,
        };
        // `x000/001` and `001` name the same tile: only the canonical one.
        if t.path() != path {
            return Err(BadTilePath);
        }
        Ok(t)
    }

    /// The first position (at its level) the tile holds, and how many.
    pub fn span(&self) -> (u64, u64) {
        (self.index.saturating_mul(TILE_WIDTH), u64::from(self.width))
    }

    /// The tree level of its hashes (0 for leaves and entries).
    pub fn tree_level(&self) -> u32 {
        u32::from(self.level.unwrap_or(0)) * u32::from(TILE_HEIGHT)
    }

    /// Does a tree of `size` leaves hold this tile whole? (A full tile once
    /// it is complete; a partial one of width `w` once at least `w` of its
    /// positions are.)
    pub fn within(&self, size: u64) -> bool {
        let Some(positions) = size.checked_shr(self.tree_level()) else {
            return false;
        };
        let (start, width) = self.span();
        start.checked_add(width).is_some_and(|end| end <= positions)
    }

    /// The stored-hash indexes ([`super::tree::stored_hash_index`]) of a
    /// hash tile's hashes, in order; the leaf positions of a bundle's
    /// entries. Only for a tile [`within`](Self::within) some tree.
    pub fn positions(&self) -> Vec<u64> {
        let (start, width) = self.span();
        let level = u8::try_from(self.tree_level()).unwrap_or(u8::MAX).min(63);
        (start..start.saturating_add(width))
            .map(|i| match self.level {
                Some(_) => super::tree::stored_hash_index(level, i),
                None => i,
            })
            .collect()
    }

    /// The tile that `tlog_tiles` names for this one.
    pub fn to_tlog(&self) -> tlog_tiles::Tile {
        tlog_tiles::Tile::new(
            TILE_HEIGHT,
            self.level.unwrap_or(0),
            self.index,
            u32::from(self.width),
            self.level.is_none(),
        )
    }

    /// This tile as `tlog_tiles` names it.
    pub fn of_tlog(t: &tlog_tiles::Tile) -> TilePath {
        TilePath {
            level: (!t.is_data()).then(|| t.level()),
            index: t.level_index(),
            width: t.width() as u16,
        }
    }
}

fn canonical_number(s: &str, max: u64) -> Result<u64, BadTilePath> {
    if s.is_empty() || s.len() > 3 || (s.len() > 1 && s.starts_with('0')) {
        return Err(BadTilePath);
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BadTilePath);
    }
    let v: u64 = s.parse().map_err(|_| BadTilePath)?;
    if v > max {
        return Err(BadTilePath);
    }
    Ok(v)
}

/// Why entries cannot be bundled: one is longer than a bundle's uint16
/// length prefix can say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("entry {index} is {len} bytes; an entry bundle holds entries of at most 65,535 bytes")]
pub struct EntryTooLong {
    pub index: usize,
    pub len: usize,
}

/// An entry bundle's bytes. An entry too long for its length prefix is
/// refused rather than cut: a cut entry would hash to another leaf.
pub fn bundle<E: AsRef<[u8]>>(entries: &[E]) -> Result<Vec<u8>, EntryTooLong> {
    let mut out = Vec::new();
    for (index, e) in entries.iter().enumerate() {
        let e = e.as_ref();
        let len = u16::try_from(e.len()).map_err(|_| EntryTooLong {
            index,
            len: e.len(),
        })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(e);
    }
    Ok(out)
}

/// Why bundle bytes are not `width` entries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the entry bundle is malformed or holds another number of entries")]
pub struct BadBundle;

/// Reads an entry bundle of exactly `width` entries.
pub fn unbundle(bytes: &[u8], width: usize) -> Result<Vec<Vec<u8>>, BadBundle> {
    let mut out = Vec::with_capacity(width);
    let mut rest = bytes;
    while !rest.is_empty() {
        let [a, b, tail @ ..] = rest else {
            return Err(BadBundle);
        };
        let len = usize::from(u16::from_be_bytes([*a, *b]));
        if tail.len() < len || out.len() == width {
            return Err(BadBundle);
        }
        out.push(tail[..len].to_vec());
        rest = &tail[len..];
    }
    if out.len() != width {
        return Err(BadBundle);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_c2sp_and_only_canonical_ones_parse() {
        let cases = [
            (TilePath::hashes(0, 0, 256), "tile/0/000"),
            (TilePath::hashes(1, 1234067, 256), "tile/1/x001/x234/067"),
            (TilePath::hashes(2, 7, 3), "tile/2/007.p/3"),
            (TilePath::entries(1000, 255), "tile/entries/x001/000.p/255"),
        ];
        for (t, p) in cases {
            assert_eq!(t.path(), p);
            assert_eq!(TilePath::parse(p), Ok(t));
            // The same path as Go's sumdb layout gives, without its height.
            assert_eq!(
                t.to_tlog()
                    .path()
                    .replacen("tile/8/", "tile/", 1)
                    .replace("/data/", "/entries/"),
                p
            );
        }
        for bad in [
            "tile/0/x000/001",
            "tile/00/000",
            "tile/64/000",
            "tile/0/000.p/0",
            "tile/0/000.p/256",
            "tile/0/000.p/07",
            "tile/0/00",
            "tile/0/0001",
            "tile/0/x1/000",
            "tile/data/000",
            "tile/0/000/",
            "checkpoint",
            "tile/0/-01",
        ] {
            assert_eq!(TilePath::parse(bad), Err(BadTilePath), "{bad}");
        }
    }

    #[test]
    fn a_tile_is_within_a_tree_once_its_positions_are() {
        // A tree of 70,000: the example of C2SP tlog-tiles.
        let size = 70_000;
        assert!(TilePath::hashes(0, 272, 256).within(size));
        assert!(!TilePath::hashes(0, 273, 256).within(size));
        assert!(TilePath::hashes(0, 273, 112).within(size));
        assert!(!TilePath::hashes(0, 273, 113).within(size));
        assert!(TilePath::hashes(1, 0, 256).within(size));
        assert!(TilePath::hashes(1, 1, 17).within(size));
        assert!(!TilePath::hashes(1, 1, 18).within(size));
        assert!(TilePath::hashes(2, 0, 1).within(size));
        assert!(!TilePath::hashes(3, 0, 1).within(size));
        assert!(!TilePath::hashes(63, u64::MAX / 256, 1).within(size));
    }

    #[test]
    fn an_entry_too_long_for_its_length_prefix_is_refused_not_cut() {
        let longest = vec![b'a'; 65_535];
        let b = bundle(&[&longest[..]]).unwrap();
        assert_eq!(unbundle(&b, 1).unwrap(), vec![longest.clone()]);
        let over = vec![b'a'; 65_536];
        assert_eq!(
            bundle(&[&b"short"[..], &over[..]]),
            Err(EntryTooLong {
                index: 1,
                len: 65_536
            })
        );
    }

    #[test]
    fn bundles_round_trip_and_refuse_another_count() {
        let entries = [b"a\n".to_vec(), Vec::new(), vec![7; 300]];
        let b = bundle(&entries).unwrap();
        assert_eq!(unbundle(&b, 3).unwrap(), entries);
        assert_eq!(unbundle(&b, 2), Err(BadBundle));
        assert_eq!(unbundle(&b, 4), Err(BadBundle));
        assert_eq!(unbundle(&b[..b.len() - 1], 3), Err(BadBundle));
    }
}
