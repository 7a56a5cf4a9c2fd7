//! Durable nonce records gathered into shared statements (`PROTOCOL.md` §6).
//!
//! On its own, a durable nonce record is one `INSERT … ON CONFLICT DO
//! NOTHING` committed with `synchronous_commit = on`: a round trip, a
//! statement for the database to run and a commit, for every nonce. With
//! many writers the database's CPU goes to those statements (measured: 8,600
//! records/s with 8 writers, the machine busy).
//!
//! So concurrent records are gathered. [`Gatherer`] runs a task on the pool's
//! runtime: it takes a request, waits for one of [`IN_FLIGHT`] slots, takes
//! every request that waits beside it (at most [`MAX_BATCH`]), and records
//! them with [`record_many`], one `INSERT … SELECT FROM unnest(…) ON
//! CONFLICT DO NOTHING RETURNING nonce` and one commit for all. Alone, a
//! record finds a slot free and is a batch of one, as before; under load,
//! the requests that arrive while the slots are busy share the next
//! statement. Each request still gets its own answer, exactly what it would
//! have got alone: [`RecordOutcome::Fresh`] only when its row was inserted,
//! otherwise the entry found.
//!
//! A request whose caller has stopped waiting (its call timed out) is left
//! out of the batch it would have joined: nothing is written for it.
//!
//! A request goes from the calling thread into the task's queue, and its
//! answer back through a channel the caller waits on: no task per record,
//! which saved a wake-up of the runtime per record.

use super::{backend, client, db_error, unavailable, Source, CALL_TIMEOUT};
use crate::{classify, NonceEntry, RecordOutcome, StoreError};
use deadpool_postgres::Pool;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Instant;
use tokio::sync::{mpsc, Semaphore};

/// How many batches may run at once (each on its own connection). Two keep
/// the database busy while the next batch gathers; more make smaller
/// batches and more statements for the same records.
pub const IN_FLIGHT: usize = 2;

/// The most records one statement carries.
pub const MAX_BATCH: usize = 256;

/// How many requests may wait to be gathered before a caller waits to
/// hand its own over.
const QUEUE: usize = 4 * MAX_BATCH;

/// How often a record is tried again when its row vanished between the
/// insert and the read (collected as expired in between).
const ROUNDS: usize = 3;

/// One caller's record, and where its answer goes.
struct Request {
    nonce: String,
    entry: NonceEntry,
    /// When the caller stops waiting (it then answers with an error itself).
    deadline: Instant,
    reply: std_mpsc::SyncSender<Result<RecordOutcome, StoreError>>,
}

/// The handle of the gathering task: requests go in, answers come back.
/// The task ends when the last handle is dropped.
#[derive(Clone)]
pub(super) struct Gatherer {
    requests: mpsc::Sender<Request>,
}

impl Gatherer {
    /// Starts the gathering task on `handle`, recording through `pool`.
    pub(super) fn start(handle: &tokio::runtime::Handle, pool: Pool) -> Self {
        Self::with_queue(handle, pool, QUEUE)
    }

    /// [`Gatherer::start`] with a queue of `len` requests.
    fn with_queue(handle: &tokio::runtime::Handle, pool: Pool, len: usize) -> Self {
        let (requests, queue) = mpsc::channel(len.max(1));
        handle.spawn(gather(pool, queue));
        Gatherer { requests }
    }

    /// Records `nonce` with the next batch and waits for its answer, at
    /// most [`CALL_TIMEOUT`]. The request goes straight from the calling
    /// thread to the gathering task, and the answer straight back (no task
    /// of its own on the runtime); when the queue is full, `enqueue` runs
    /// the wait for room on the runtime. Never enters a runtime on the
    /// calling thread.
    pub(super) fn record(
        &self,
        nonce: String,
        entry: NonceEntry,
        enqueue: impl FnOnce(Pin<Box<dyn Future<Output = bool> + Send>>) -> bool,
    ) -> Result<RecordOutcome, StoreError> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        let deadline = Instant::now() + CALL_TIMEOUT;
        let request = Request {
            nonce,
            entry,
            deadline,
            reply,
        };
        let handed = match self.requests.try_send(request) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(request)) => {
                let requests = self.requests.clone();
                enqueue(Box::pin(
                    async move { requests.send(request).await.is_ok() },
                ))
            }
        };
        if !handed {
            return Err(unavailable(
                "record nonce",
                "the nonce recorder has stopped",
            ));
        }
        match answer.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(answer) => answer,
            Err(std_mpsc::RecvTimeoutError::Timeout) => Err(unavailable(
                "record nonce",
                "the database did not answer in time",
            )),
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(unavailable(
                "record nonce",
                "the nonce recorder ended without an answer",
            )),
        }
    }
}

/// The gathering task (module docs).
async fn gather(pool: Pool, mut queue: mpsc::Receiver<Request>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(first) = queue.recv().await {
        // While every slot is busy, more requests arrive: they join this batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let pool = pool.clone();
        tokio::spawn(async move {
            run(&pool, batch).await;
            drop(slot);
        });
    }
}

/// Records one batch and answers each of its callers.
async fn run(pool: &Pool, batch: Vec<Request>) {
    let now = Instant::now();
    let batch: Vec<Request> = batch.into_iter().filter(|r| r.deadline > now).collect();
    if batch.is_empty() {
        return;
    }
    let answers = {
        let items: Vec<(&str, &NonceEntry)> =
            batch.iter().map(|r| (r.nonce.as_str(), &r.entry)).collect();
        match tokio::time::timeout(
            CALL_TIMEOUT,
            record_many(&Source::Pool(pool.clone()), &items),
        )
        .await
        {
            Ok(Ok(answers)) => answers,
            Ok(Err(e)) => items.iter().map(|_| Err(shared(&e))).collect(),
            Err(_) => items
                .iter()
                .map(|_| {
                    Err(unavailable(
                        "record nonce",
                        "the database did not answer in time",
                    ))
                })
                .collect(),
        }
    };
    for (request, answer) in batch.into_iter().zip(answers) {
        // A caller that stopped waiting no longer needs its answer.
        let _ = request.reply.send(answer);
    }
}

/// The error of a statement that failed, for each caller it stood for.
fn shared(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable { op, message } => StoreError::Unavailable {
            op,
            message: message.clone(),
        },
        other => StoreError::Backend {
            op: "record nonce",
            message: other.to_string(),
        },
    }
}

/// Records every `(nonce, entry)` of `items` that is absent, in one statement
/// and one commit, and answers for each in order: [`RecordOutcome::Fresh`]
/// when this call inserted it, otherwise the entry found (the same digest or
/// another). A nonce given twice is inserted for its first item; the later
/// one finds the first's entry, as it would had it come after. The outer
/// error is a failed statement (nothing is known of any item); an inner one
/// concerns its item alone (a stored entry that cannot be read).
pub(super) async fn record_many(
    source: &Source,
    items: &[(&str, &NonceEntry)],
) -> Result<Vec<Result<RecordOutcome, StoreError>>, StoreError> {
    let op = "record nonce";
    let err = db_error(op);
    let c = client(source, op).await?;
    let insert = c
        .prepare_cached(
            "INSERT INTO rs_nonces (nonce, digest, expires_at, data)
             SELECT * FROM unnest($1::text[], $2::bytea[], $3::bigint[], $4::bytea[])
             ON CONFLICT (nonce) DO NOTHING
             RETURNING nonce",
        )
        .await
        .map_err(&err)?;
    let select = c
        .prepare_cached(
            "SELECT nonce, digest, expires_at, data FROM rs_nonces WHERE nonce = ANY($1::text[])",
        )
        .await
        .map_err(&err)?;

    let mut answers: Vec<Option<Result<RecordOutcome, StoreError>>> =
        items.iter().map(|_| None).collect();
    let mut pending: Vec<usize> = (0..items.len()).collect();
    for _ in 0..ROUNDS {
        if pending.is_empty() {
            break;
        }
        // The first item of each nonce is inserted; the others are read.
        let mut seen = HashSet::with_capacity(pending.len());
        let mut first = vec![false; items.len()];
        let inserted: Vec<usize> = pending
            .iter()
            .copied()
            .filter(|&i| seen.insert(items[i].0))
            .collect();
        for &i in &inserted {
            first[i] = true;
        }
        let nonces: Vec<&str> = inserted.iter().map(|&i| items[i].0).collect();
        let digests: Vec<&[u8]> = inserted.iter().map(|&i| &items[i].1.digest[..]).collect();
        let expiries: Vec<i64> = inserted.iter().map(|&i| items[i].1.expires_at).collect();
        let data: Vec<&[u8]> = inserted.iter().map(|&i| &items[i].1.data[..]).collect();
        let fresh: HashSet<String> = c
            .query(&insert, &[&nonces, &digests, &expiries, &data])
            .await
            .map_err(&err)?
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect();
        let mut read = Vec::new();
        for &i in &pending {
            if first[i] && fresh.contains(items[i].0) {
                answers[i] = Some(Ok(RecordOutcome::Fresh));
            } else {
                read.push(i);
            }
        }
        if read.is_empty() {
            pending.clear();
            break;
        }
        let wanted: Vec<&str> = read.iter().map(|&i| items[i].0).collect();
        let mut found = HashMap::with_capacity(wanted.len());
        for row in c.query(&select, &[&wanted]).await.map_err(&err)? {
            let nonce: String = row.get("nonce");
            let entry = super::rs::entry_of(&row, &nonce);
            found.insert(nonce, entry);
        }
        pending.clear();
        for i in read {
            match found.get(items[i].0) {
                Some(Ok(old)) => answers[i] = Some(Ok(classify(items[i].1, old.clone()))),
                Some(Err(e)) => answers[i] = Some(Err(shared_corrupt(e))),
                // Collected since the insert: tried again next round.
                None => pending.push(i),
            }
        }
    }
    Ok(answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(backend(op, "the entry kept vanishing"))))
        .collect())
}

/// An unreadable stored entry, for each item that found it.
fn shared_corrupt(e: &StoreError) -> StoreError {
    match e {
        StoreError::Corrupt { key, reason } => StoreError::Corrupt {
            key: key.clone(),
            reason: reason.clone(),
        },
        other => shared(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::{test_database_or_skip, Pg};

    /// With a queue of one, most of 24 concurrent callers find it full and
    /// hand their request over on the runtime: each still gets its answer,
    /// and a nonce given by two callers is fresh for exactly one of them.
    #[test]
    fn callers_that_find_the_queue_full_wait_for_room() {
        let Some(url) = test_database_or_skip("nonce_batch_full") else {
            return;
        };
        let pg = Pg::new(&url, 4).unwrap();
        crate::pg::rs::nonces(&pg).unwrap();
        let gatherer = Gatherer::with_queue(&pg.inner.handle, pg.inner.pool.clone(), 1);
        let enqueued = std::sync::atomic::AtomicUsize::new(0);
        let answers: Vec<(usize, RecordOutcome)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..24usize)
                .map(|i| {
                    let (gatherer, pg, enqueued) = (&gatherer, &pg, &enqueued);
                    scope.spawn(move || {
                        let entry = NonceEntry {
                            digest: [u8::try_from(i).unwrap(); 32],
                            expires_at: 100,
                            data: vec![],
                        };
                        // Threads 0 and 12, 1 and 13, … share a nonce.
                        let nonce = format!("n{}", i % 12);
                        let answer = gatherer
                            .record(nonce, entry, |wait| {
                                enqueued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                pg.call("record nonce", move |_| async move { Ok(wait.await) })
                                    .unwrap_or(false)
                            })
                            .unwrap();
                        (i, answer)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for pair in 0..12 {
            let (a, b) = (&answers[pair].1, &answers[pair + 12].1);
            let fresh = [a, b]
                .iter()
                .filter(|o| matches!(o, RecordOutcome::Fresh))
                .count();
            assert_eq!(fresh, 1, "nonce n{pair}: {a:?}, {b:?}");
            assert!(
                [a, b]
                    .iter()
                    .any(|o| matches!(o, RecordOutcome::Conflict(_))),
                "nonce n{pair}: {a:?}, {b:?}"
            );
        }
        assert!(enqueued.load(std::sync::atomic::Ordering::SeqCst) > 0);
    }

    /// A caller past its deadline is left out: nothing is written for it.
    #[test]
    fn a_request_past_its_deadline_is_not_written() {
        let Some(url) = test_database_or_skip("nonce_batch_late") else {
            return;
        };
        let pg = Pg::new(&url, 2).unwrap();
        let store = crate::pg::rs::nonces(&pg).unwrap();
        let (reply, answer) = std_mpsc::sync_channel(1);
        let late = Request {
            nonce: "late".to_owned(),
            entry: NonceEntry {
                digest: [1; 32],
                expires_at: 100,
                data: vec![],
            },
            deadline: Instant::now(),
            reply,
        };
        let pool = pg.inner.pool.clone();
        pg.inner.handle.block_on(run(&pool, vec![late]));
        assert!(answer.try_recv().is_err());
        assert_eq!(store.get("late").unwrap(), None);
    }
}
