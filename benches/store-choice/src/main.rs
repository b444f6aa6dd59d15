//! The state updates of `weir bench checkpoint`'s job (COUNT and SUM per key
//! `id % keys`) on fjall, an embedded LSM in Rust, read-modify-write per
//! key after each 8192-row batch is pre-aggregated in memory, as a
//! key-value state backend (Flink's RocksDB one) would do them. Prints rows/s
//! and the peak resident set, to set beside `weir bench checkpoint --spilling`.

use std::collections::HashMap;
use std::time::Instant;

fn peak_rss_mb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let (rows, keys, budget_mb) = (args[0], args[1], args[2]);
    let dir = std::env::temp_dir().join(format!("store-choice-{}", std::process::id()));
    let keyspace = fjall::Config::new(&dir)
        .cache_size(budget_mb * (1 << 20) / 2)
        .max_write_buffer_size(budget_mb * (1 << 20) / 4)
        .open()?;
    let state = keyspace.open_partition("window", fjall::PartitionCreateOptions::default())?;
    let started = Instant::now();
    let mut batch: HashMap<u64, (i64, i64)> = HashMap::new();
    let mut id = 0u64;
    while id < rows {
        batch.clear();
        let end = (id + 8192).min(rows);
        for row in id..end {
            let entry = batch.entry(row % keys).or_default();
            entry.0 += 1;
            entry.1 += row as i64;
        }
        id = end;
        for (key, (count, sum)) in &batch {
            let key = key.to_be_bytes();
            let (mut c, mut s) = (*count, *sum);
            if let Some(old) = state.get(key)? {
                c += i64::from_le_bytes(old[..8].try_into()?);
                s += i64::from_le_bytes(old[8..16].try_into()?);
            }
            let mut value = [0u8; 16];
            value[..8].copy_from_slice(&c.to_le_bytes());
            value[8..].copy_from_slice(&s.to_le_bytes());
            state.insert(key, value)?;
        }
    }
    let updated = started.elapsed().as_secs_f64();
    // Firing the window: every key read back in order.
    let mut fired = 0u64;
    for item in state.iter() {
        item?;
        fired += 1;
    }
    let total = started.elapsed().as_secs_f64();
    println!(
        "fjall: {rows} rows, {keys} keys, {budget_mb} MB cache+buffers: updates {:.2}M rows/s, \
         with the firing scan {:.2}M rows/s ({fired} keys), peak RSS {} MB, on disk {} MB",
        rows as f64 / updated / 1e6,
        rows as f64 / total / 1e6,
        peak_rss_mb(),
        keyspace.disk_space() >> 20
    );
    drop(state);
    drop(keyspace);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
