//! A bounded map of recent values by id, kept in memory by a server to
//! spare its store a look-up: the CS's verified pages and started
//! confirmations (`confirm::flow`), the RS's pending records on a remote
//! store (`resource::cheq_rs`). The oldest put goes first; every
//! operation is O(1) amortized.

use std::sync::Mutex;

/// A bounded map of what was kept last, by id: the oldest
/// goes first. Every operation is O(1) amortized (an `IndexMap` evicting its
/// first entry moves all the others: with thousands kept, that was a copy of
/// hundreds of kilobytes per confirmation started).
pub struct Recent<V> {
    inner: Mutex<RecentInner<V>>,
    capacity: usize,
}

struct RecentInner<V> {
    /// Each id's value and the number of the put that wrote it.
    map: std::collections::HashMap<String, (u64, V)>,
    /// Ids in the order of their puts; a pair whose number is no longer the
    /// id's in `map` (put again, or removed) is stale and skipped.
    order: std::collections::VecDeque<(u64, String)>,
    next: u64,
}

impl<V: Clone> Recent<V> {
    pub fn new(capacity: usize) -> Self {
        Recent {
            inner: Mutex::new(RecentInner {
                map: std::collections::HashMap::new(),
                order: std::collections::VecDeque::new(),
                next: 0,
            }),
            capacity: capacity.max(1),
        }
    }

    pub fn get(&self, id: &str) -> Option<V> {
        let inner = self.inner.lock().ok()?;
        inner.map.get(id).map(|(_, v)| v.clone())
    }

    pub fn put(&self, id: &str, value: V) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let n = inner.next;
        inner.next += 1;
        inner.map.insert(id.to_owned(), (n, value));
        inner.order.push_back((n, id.to_owned()));
        while inner.map.len() > self.capacity {
            let Some((n, oldest)) = inner.order.pop_front() else {
                break;
            };
            if inner.map.get(&oldest).is_some_and(|(m, _)| *m == n) {
                inner.map.remove(&oldest);
            }
        }
        // Removals leave stale pairs behind: drop them once they outnumber
        // the live ones, so the order stays within twice the capacity.
        if inner.order.len() > 2 * self.capacity {
            let RecentInner { map, order, .. } = &mut *inner;
            order.retain(|(n, id)| map.get(id).is_some_and(|(m, _)| m == n));
        }
    }

    /// The value of `id`, which is forgotten.
    pub fn take(&self, id: &str) -> Option<V> {
        let mut inner = self.inner.lock().ok()?;
        inner.map.remove(id).map(|(_, v)| v)
    }

    pub fn remove(&self, id: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.map.remove(id);
        }
    }

    #[cfg(test)]
    pub(crate) fn order_len(&self) -> usize {
        self.inner.lock().map(|i| i.order.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn recent_keeps_the_last_puts_and_drops_the_oldest_first() {
        let r = Recent::new(3);
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            r.put(id, i);
        }
        // Put again: "a" is now the newest.
        r.put("a", 10);
        r.put("d", 3);
        assert_eq!(r.get("b"), None, "the oldest went first");
        assert_eq!(r.get("a"), Some(10));
        assert_eq!(r.get("c"), Some(2));
        assert_eq!(r.get("d"), Some(3));
        r.put("e", 4);
        assert_eq!(r.get("c"), None);
        assert_eq!(
            (r.get("a"), r.get("d"), r.get("e")),
            (Some(10), Some(3), Some(4))
        );
    }

    #[test]
    fn recent_stays_bounded_when_most_entries_are_removed() {
        let r = Recent::new(4);
        for i in 0..10_000 {
            let id = format!("id{i}");
            r.put(&id, i);
            if i % 5 != 0 {
                r.remove(&id);
            }
            assert!(
                r.order_len() <= 2 * 4 + 1,
                "order grew to {}",
                r.order_len()
            );
        }
        // Each put makes room first: the last three not removed are kept
        // (the put of "id9999", removed after, pushed "id9980" out).
        for i in [9_985, 9_990, 9_995] {
            assert_eq!(r.get(&format!("id{i}")), Some(i));
        }
        assert_eq!(r.get("id9980"), None);
        assert_eq!(r.get("id9999"), None);
    }
}
