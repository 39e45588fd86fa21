//! `limits.max_sessions_per_key` counted in Redis, fleet-wide, in a few tens of bytes a key
//! (issue 37: a hash of its own per key cost about 190 B, so a client holding one session, the
//! commonest shape behind a balancer, made a session cost ~760 B in all).
//!
//! Keys share hashes. A key's count is one field of a hash shared with other keys, named by
//! the key's hash tag `t` (one of [`TAGS`], so the counts spread over a Cluster's slots and
//! one key's hashes share a slot) and the **epoch** `e` (the instance's Unix time / the session
//! lifetime; what still counts goes by Redis's clock, within 10 granules of the instance's, or
//! the script refuses to count and `limits.on_store_error` decides):
//! `<prefix>{s<t>}:sessions:<e>`. A hash holds at most [`CAP`] fields, so Redis keeps it in its
//! compact listpack encoding (`hash-max-listpack-entries`, 128 by default); a full one is
//! marked (field `~`) and later keys of its epoch go one **tier** down, to one of [`FANOUT`]
//! hashes under it, `<prefix>{s<t>}:sessions:<e>:<tier>:<n>`, and so on for [`TIERS`] tiers:
//! from about 5,000 to 500 million keys a lifetime, a key costs ~25 to 40 B, with no setting
//! (~90 B at 2,000 keys, when most hashes hold one or two).
//! A key's field is in the first tier of its epoch not marked full when it was written, so a
//! lookup walks down the marked ones only (one `HMGET` a tier).
//!
//! The field is the client key (a digest of it past [`FIELD_MAX`] bytes); its value counts
//! the key's sessions by the granule (a thirtieth of the lifetime) in which they stop counting,
//! a letter a granule, then its count unless 1 (`Q`, `Q3R`): the same granules as before, in a
//! value short enough for the listpack (`hash-max-listpack-value`, 64 B, holds about 30 busy
//! granules; a longer value is still right, its hash only less compact). Sessions admitted in
//! epoch `e` stop counting by the end of `e + 1`, so admission reads the key's fields in `e`
//! and `e - 1` and nothing older; a hash expires with its last session (or, marked full, with
//! its epoch), so nothing is swept: never `KEYS` or `SCAN`.
//!
//! Keys of the previous layout (`<prefix>{<key>}:session-expiries`) are not read; they expire
//! with their last session. During a rolling upgrade old and new instances each count only
//! what they admitted, so a key's count errs low (a key may hold up to twice its most
//! sessions) for at most one lifetime after the last old instance stops; it never refuses a
//! session it should admit.

use sha2::{Digest, Sha256};

/// Tier-0 hashes, each its own hash tag: the counts spread over this many Cluster slots.
const TAGS: u64 = 1024;
/// Hashes under each one of the tier above.
const FANOUT: u64 = 16;
/// Tiers: 1024 × (1 + 16 + 256 + 4096) hashes of [`CAP`] keys, about 537M keys a lifetime.
pub(super) const TIERS: u32 = 4;
/// Fields a hash takes before it is marked full (below 128, the default listpack bound).
pub(super) const CAP: usize = 120;
/// A client key longer than this is counted under its digest (so a field stays short).
const FIELD_MAX: usize = 32;

/// Helpers both scripts start with. `ARGV[1..4]`: the field, the tiers, the lifetime and the
/// granule (ms). A value's letter `c` in epoch `x` is granule `base(x) + (c's place in ALPHA)`:
/// sessions admitted in `x` (Redis's clock within about `SHIFT` granules of the instance's)
/// stop counting in granules `base(x) + 11` to `base(x) + 43`.
const PRELUDE: &str = r"
local ALPHA = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
local SHIFT = 10
local FULL = '~'
local field, tiers, life, g = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local function base(x) return math.floor((x + 1) * life / g) - SHIFT end

-- A value read in epoch x: {granule = count}, the sum, and whether any granule up to `from`
-- (one that began) was left out.
local function decode(v, x, from)
  local counts, sum, dropped, b = {}, 0, false, base(x)
  for c, n in string.gmatch(v or '', '(%a)(%d*)') do
    local at = b + string.find(ALPHA, c, 1, true)
    local k = tonumber(n) or 1
    if from and at <= from then
      dropped = true
    else
      counts[at] = (counts[at] or 0) + k
      sum = sum + k
    end
  end
  return counts, sum, dropped
end

local function store(key, counts, x)
  local ats, b = {}, base(x)
  for at, k in pairs(counts) do
    if k > 0 then ats[#ats + 1] = at end
  end
  if #ats == 0 then
    redis.call('HDEL', key, field)
    return
  end
  table.sort(ats)
  for n, at in ipairs(ats) do
    local k, i = counts[at], at - b
    ats[n] = ALPHA:sub(i, i) .. (k > 1 and k or '')
  end
  redis.call('HSET', key, field, table.concat(ats))
end

-- The field among one epoch's tiers KEYS[first .. first + tiers - 1]: the tier holding it and
-- its value, else the tier it would go to (the first not marked full, or the last); and
-- whether that tier is marked full.
local function find(first)
  local last = first + tiers - 1
  for i = first, last do
    local v = redis.call('HMGET', KEYS[i], field, FULL)
    if v[1] or not v[2] or i == last then return i, v[1], v[2] ~= false end
  end
end
";

/// Takes a place for a session. `KEYS`: the key's tiers in epoch `e`, then in `e - 1`.
/// `ARGV[5..7]`: the most sessions, `e`, [`CAP`]. Sums what still counts in both (dropping
/// granules that began), and below the most adds the session to the granule it stops counting
/// in. An unmarked hash expires with its last session; a marked one with its epoch, since keys
/// below it need its mark as long as they count. Returns 1 (admitted) or 0 (full).
const ADMIT: &str = r"
local max, e, cap = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_g = math.floor(now / g)
local i, v, full = find(1)
local j, w = find(tiers + 1)
local counts, live, dropped = decode(v, e, now_g)
local older, left, gone = decode(w, e - 1, now_g)
if gone then store(KEYS[j], older, e - 1) end
if live + left >= max then
  if dropped then store(KEYS[i], counts, e) end
  return 0
end
local until_g = math.floor((now + life) / g) + 1
local at = until_g - base(e)
if at < 1 or at > #ALPHA then
  return redis.error_reply('session count: this instance clock is more than 10 granules off Redis')
end
if not v and i < tiers and redis.call('HLEN', KEYS[i]) >= cap then
  redis.call('HSET', KEYS[i], FULL, 1)
  redis.call('PEXPIREAT', KEYS[i], (base(e) + #ALPHA) * g)
  i, full = i + 1, false
end
counts[until_g] = (counts[until_g] or 0) + 1
store(KEYS[i], counts, e)
if not full then redis.call('PEXPIRE', KEYS[i], until_g * g - now) end
return 1
";

/// Gives back one place. `KEYS`: the key's tiers in each epoch the session may have been
/// admitted in (the first most likely); `ARGV[5]`: the granule it stops counting in, as the
/// instance's clock reckons it; `ARGV[6..]`: those epochs. Clocks differ by far less than a
/// granule, so the granule is that one or a neighbour: the first that still counts a session
/// loses one. Returns 1 if one was given back.
const END: &str = r"
local until_g = tonumber(ARGV[5])
for k = 6, #ARGV do
  local x = tonumber(ARGV[k])
  local i, v = find((k - 6) * tiers + 1)
  if v then
    local counts = decode(v, x)
    for _, at in ipairs({until_g, until_g - 1, until_g + 1}) do
      if counts[at] then
        counts[at] = counts[at] - 1
        store(KEYS[i], counts, x)
        return 1
      end
    end
  end
end
return 0
";

/// The admission script's text.
pub(super) fn admit_script() -> String {
    format!("{PRELUDE}{ADMIT}")
}

/// The script giving a place back.
pub(super) fn end_script() -> String {
    format!("{PRELUDE}{END}")
}

/// The lifetime a session counts for and its granule, in ms: a thirtieth of the lifetime, at
/// least a second (and the lifetime at least one granule), so a key's value holds at most
/// about 33 granules and a session stops counting at most a granule after its record would
/// have expired.
#[derive(Clone, Copy)]
pub(super) struct Lifetime {
    pub life_ms: u64,
    pub granule_ms: u64,
}

impl Lifetime {
    pub fn of(ttl_ms: u64) -> Self {
        let life_ms = ttl_ms.max(1000);
        Self {
            life_ms,
            granule_ms: (life_ms / 30).max(1000),
        }
    }

    /// The epoch of Unix time `ms`.
    pub fn epoch(self, ms: u64) -> u64 {
        ms / self.life_ms
    }

    /// The granule a session admitted at `ms` stops counting in (as [`ADMIT`] reckons it).
    pub fn until_granule(self, ms: u64) -> u64 {
        (ms + self.life_ms) / self.granule_ms + 1
    }

    /// The epochs a session admitted at `ms` (this instance's clock) may be counted in: its
    /// own, then a neighbour when `ms` is within a granule of the epoch's edge.
    pub fn epochs_near(self, ms: u64) -> Vec<u64> {
        let e = self.epoch(ms);
        let into = ms % self.life_ms;
        let mut epochs = vec![e];
        if into < self.granule_ms && e > 0 {
            epochs.push(e - 1);
        }
        if self.life_ms - into <= self.granule_ms {
            epochs.push(e + 1);
        }
        epochs
    }
}

/// Where one client key is counted: its field, and the hash tag and tier hashes it falls in.
pub(super) struct CountCell {
    pub field: String,
    /// A stable hash of the key (the same on every instance and version).
    hash: u64,
}

impl CountCell {
    pub fn of(key: &str) -> Self {
        let digest = Sha256::digest(key.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        let field = if key.len() <= FIELD_MAX {
            key.to_string()
        } else {
            // 96 bits: two keys of one hash sharing a digest is out of reach.
            let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
            format!("#{hex}")
        };
        Self {
            field,
            hash: u64::from_be_bytes(first),
        }
    }

    /// The tiers' hashes in epoch `e`, top first ([`TIERS`] names).
    pub fn keys(&self, prefix: &str, e: u64) -> impl Iterator<Item = String> + '_ {
        let tag = self.hash % TAGS;
        let below = self.hash / TAGS;
        let top = format!("{prefix}{{s{tag}}}:sessions:{e}");
        (0..TIERS).map(move |tier| match tier {
            0 => top.clone(),
            _ => format!("{top}:{tier}:{}", below % FANOUT.pow(tier)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_key_is_counted_under_a_short_digest_and_every_tier_shares_its_tag() {
        let short = CountCell::of("addr:192.0.2.1");
        assert_eq!(short.field, "addr:192.0.2.1");
        let long = CountCell::of("addr:2001:db8:1234:5678:9abc:def0:1234:5678/128");
        assert_eq!(long.field.len(), 25, "{}", long.field);
        assert!(long.field.starts_with('#'));
        let keys: Vec<String> = long.keys("mcp:limits:", 7).collect();
        assert_eq!(keys.len(), TIERS as usize);
        let tag = &keys[0][keys[0].find('{').unwrap_or(0)..=keys[0].find('}').unwrap_or(0)];
        assert!(keys.iter().all(|k| k.contains(tag)), "{keys:?}");
        assert_eq!(keys[0], format!("mcp:limits:{tag}:sessions:7"));
    }

    #[test]
    fn a_session_near_an_epochs_edge_is_looked_for_in_both() {
        let l = Lifetime::of(3_600_000);
        assert_eq!(l.granule_ms, 120_000);
        assert_eq!(l.epochs_near(7 * 3_600_000 + 1_000_000), vec![7]);
        assert_eq!(l.epochs_near(7 * 3_600_000 + 1_000), vec![7, 6]);
        assert_eq!(l.epochs_near(8 * 3_600_000 - 1_000), vec![7, 8]);
        // A lifetime below a second counts for one.
        assert_eq!(Lifetime::of(1).life_ms, 1000);
    }
}
