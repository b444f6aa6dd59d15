//! The Nexmark event generator (Beam's model), deterministic per event id.
//!
//! Every field of an event is a function of its id and the configuration: each
//! event draws from its own random stream, seeded from the id (as Beam does with
//! `new Random(eventId)`), and its event time is `base_time + id * 1e6 /
//! first_event_rate` microseconds. So the same id gives the same event at any
//! parallelism, at any emission rate, and when it is generated again after a
//! restore.
//!
//! The model, in brief (defaults):
//! - the kind follows from `id % 50`: 0 a person, 1–3 an auction, 4–49 a bid;
//! - person and auction ids start at 1000 and advance once per 50 events
//!   (persons) or three times (auctions);
//! - bids go to the current hot auction with odds 1:1 (else to one of the last
//!   ~100 auctions), come from the hot bidder with odds 3:1 (else one of the
//!   last 1000 people); auctions are sold by the hot seller with odds 3:1;
//! - prices are log-uniform between 100 and 10^8; categories are 10..14;
//! - bids come through one of four named channels (with fixed URLs) or one of
//!   10 000 `channel-N` channels; `extra` pads events toward 200 / 500 / 100
//!   bytes.
//!
//! Unlike Flink's port, ids start at 0, `bidder` gets the first person id once
//! (the port adds it twice), and the channel URLs are fixed by a seed.

use std::io::Write;
use std::sync::{Arc, OnceLock};

use arrow::array::{
    ArrayRef, BooleanBufferBuilder, Int32Array, Int64Array, StringArray, StructArray,
    TimestampMillisecondArray,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Fields, TimeUnit};

/// The first person id (and first auction id).
pub const FIRST_PERSON_ID: i64 = 1000;
/// The first auction id.
pub const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: u64 = 5;
const PERSON_ID_LEAD: i64 = 10;
const AUCTION_ID_LEAD: i64 = 10;
const HOT_SELLER_RATIO: i64 = 100;
const HOT_AUCTION_RATIO: i64 = 100;
const HOT_BIDDER_RATIO: i64 = 100;
const NUM_ACTIVE_PEOPLE: i64 = 1000;
const NUM_IN_FLIGHT_AUCTIONS: i64 = 100;
const CHANNELS: usize = 10_000;

/// 2015-07-15T00:00:00Z, Beam's base time: runs are reproducible by default.
pub const DEFAULT_BASE_TIME_MS: i64 = 1_436_918_400_000;

const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];

/// The kind of an event, its `event_type` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// `event_type = 0`.
    Person = 0,
    /// `event_type = 1`.
    Auction = 1,
    /// `event_type = 2`.
    Bid = 2,
}

/// What the generator produces, from the connector's options.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorConfig {
    /// `person.proportion`.
    pub person_proportion: u64,
    /// `auction.proportion`.
    pub auction_proportion: u64,
    /// `bid.proportion`.
    pub bid_proportion: u64,
    /// `first-event.rate`: events per second of event time.
    pub first_event_rate: u64,
    /// Event time of event 0, ms since the epoch.
    pub base_time_ms: i64,
    /// `person.avg-size` in bytes.
    pub avg_person_size: usize,
    /// `auction.avg-size` in bytes.
    pub avg_auction_size: usize,
    /// `bid.avg-size` in bytes.
    pub avg_bid_size: usize,
    /// `bid.hot-ratio.auctions`.
    pub hot_auction_ratio: u64,
    /// `bid.hot-ratio.bidders`.
    pub hot_bidder_ratio: u64,
    /// `auction.hot-ratio.sellers`.
    pub hot_seller_ratio: u64,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            person_proportion: 1,
            auction_proportion: 3,
            bid_proportion: 46,
            first_event_rate: 10_000,
            base_time_ms: DEFAULT_BASE_TIME_MS,
            avg_person_size: 200,
            avg_auction_size: 500,
            avg_bid_size: 100,
            hot_auction_ratio: 2,
            hot_bidder_ratio: 4,
            hot_seller_ratio: 4,
        }
    }
}

impl GeneratorConfig {
    fn total_proportion(&self) -> u64 {
        self.person_proportion + self.auction_proportion + self.bid_proportion
    }

    /// The kind of event `id`.
    pub fn kind(&self, id: u64) -> EventKind {
        let rem = id % self.total_proportion();
        if rem < self.person_proportion {
            EventKind::Person
        } else if rem < self.person_proportion + self.auction_proportion {
            EventKind::Auction
        } else {
            EventKind::Bid
        }
    }

    /// Event time of event `id`: `base + id * 1e6 / rate` µs, in ms.
    pub fn event_time_ms(&self, id: u64) -> i64 {
        self.base_time_ms + (id as u128 * 1000 / self.first_event_rate as u128) as i64
    }

    /// Id (from 0) of the latest person at or before event `id`.
    pub fn last_base0_person_id(&self, id: u64) -> i64 {
        let total = self.total_proportion();
        let epoch = id / total;
        let offset = (id % total).min(self.person_proportion - 1);
        (epoch * self.person_proportion + offset) as i64
    }

    /// Id (from 0) of the latest auction at or before event `id`.
    pub fn last_base0_auction_id(&self, id: u64) -> i64 {
        let total = self.total_proportion();
        let mut epoch = (id / total) as i64;
        let mut offset = (id % total) as i64;
        let (p, a) = (self.person_proportion as i64, self.auction_proportion as i64);
        if offset < p {
            epoch -= 1;
            offset = a - 1;
        } else if offset >= p + a {
            offset = a - 1;
        } else {
            offset -= p;
        }
        epoch * a + offset
    }

    fn next_base0_person_id(&self, id: u64, rng: &mut EventRng) -> i64 {
        let people = self.last_base0_person_id(id) + 1;
        let active = people.min(NUM_ACTIVE_PEOPLE);
        people - active + rng.below((active + PERSON_ID_LEAD) as u64) as i64
    }

    fn next_base0_auction_id(&self, id: u64, rng: &mut EventRng) -> i64 {
        let max = self.last_base0_auction_id(id);
        let min = (max - NUM_IN_FLIGHT_AUCTIONS).max(0);
        min + rng.below((max - min + 1 + AUCTION_ID_LEAD) as u64) as i64
    }

    /// How long an auction opened at event `id` lasts: uniform in
    /// `[1, 2 * horizon]` ms, where the horizon is the time until the
    /// `num_in_flight_auctions`-th next auction.
    fn auction_length_ms(&self, id: u64, rng: &mut EventRng) -> i64 {
        let events_for_auctions =
            NUM_IN_FLIGHT_AUCTIONS as u64 * self.total_proportion() / self.auction_proportion;
        let horizon = self.event_time_ms(id + events_for_auctions) - self.event_time_ms(id);
        1 + rng.below((2 * horizon).max(1) as u64) as i64
    }
}

/// The random stream of one event: SplitMix64 seeded from the event id.
pub struct EventRng {
    state: u64,
}

impl EventRng {
    /// The stream of event `id`.
    pub fn for_event(id: u64) -> Self {
        EventRng {
            state: id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x6A09_E667_F3BC_C909,
        }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, bound)` (`bound > 0`).
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Log-uniform price between 100 and 10^8 (Beam's `nextPrice`).
    fn price(&mut self) -> i64 {
        // 10^(6u) as e^(6u ln 10): the same value, and exp is cheaper than powf.
        ((self.unit() * 6.0 * std::f64::consts::LN_10).exp() * 100.0).round() as i64
    }

    /// A string of 3 to `max_length - 1` letters, a `special` character with
    /// odds 1:12 per position, trimmed of spaces (Beam's `nextString`).
    fn string(&mut self, max_length: u64, special: u8, out: &mut Vec<u8>) {
        let start = out.len();
        let length = 3 + self.below(max_length - 3);
        for _ in 0..length {
            if self.below(13) == 0 {
                out.push(special);
            } else {
                out.push(b'a' + self.below(26) as u8);
            }
        }
        if special == b' ' {
            // Java's trim(): drop spaces at both ends of what was just written.
            let end = out.len() - out[start..].iter().rev().take_while(|b| **b == b' ').count();
            out.truncate(end);
            let lead = out[start..].iter().take_while(|b| **b == b' ').count();
            out.drain(start..start + lead);
        }
    }

    /// Padding of `length` characters: a slice of [`padding_pool`] at an offset
    /// drawn from the event's stream.
    fn exact_string(&mut self, length: usize, out: &mut Vec<u8>) {
        let pool = padding_pool();
        let length = length.min(pool.len());
        let offset = self.below((pool.len() - length + 1) as u64) as usize;
        out.extend_from_slice(&pool[offset..offset + length]);
    }

    /// Pads an event of `current` bytes toward `average` (Beam's `nextExtra`).
    fn extra(&mut self, current: usize, average: usize, out: &mut Vec<u8>) {
        if current > average {
            return;
        }
        let wanted = (average - current) as i64;
        let delta = (wanted as f64 * 0.2).round() as i64;
        let size = wanted - delta
            + if delta == 0 {
                0
            } else {
                self.below((2 * delta) as u64) as i64
            };
        self.exact_string(size as usize, out);
    }
}

/// 1 MiB of padding text with the character distribution of Beam's
/// `nextExactString`: six characters per 32 random bits, `'a' + (bits / 26^k) %
/// 26` with Java's truncating division and signed remainder, so characters run
/// from `H` to `z`. Generated once from a fixed seed; an event's `extra` is a
/// slice of it, which costs a copy instead of ~70 divisions per event.
fn padding_pool() -> &'static [u8] {
    static POOL: OnceLock<Vec<u8>> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut rng = EventRng::for_event(u64::MAX - 11);
        let mut pool = Vec::with_capacity(1 << 20);
        while pool.len() < 1 << 20 {
            let word = rng.next_u64();
            for half in [word as i32, (word >> 32) as i32] {
                let mut bits = half;
                for _ in 0..6 {
                    pool.push((b'a' as i32 + bits % 26) as u8);
                    bits /= 26;
                }
            }
        }
        pool
    })
}

/// The URLs of the four named channels and of `channel-0` .. `channel-9999`,
/// fixed by a seed: `https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1`, and
/// for nine channels in ten `&channel_id=<id>`.
struct ChannelUrls {
    hot: Vec<String>,
    cold: Vec<String>,
}

fn channel_urls() -> &'static ChannelUrls {
    static URLS: OnceLock<ChannelUrls> = OnceLock::new();
    URLS.get_or_init(|| {
        let mut rng = EventRng::for_event(u64::MAX - 7);
        let base = |rng: &mut EventRng| {
            let mut url = b"https://www.nexmark.com/".to_vec();
            for part in 0..3 {
                if part > 0 {
                    url.push(b'/');
                }
                rng.string(5, b'_', &mut url);
            }
            url.extend_from_slice(b"/item.htm?query=1");
            String::from_utf8(url).expect("ASCII")
        };
        let hot = (0..HOT_CHANNELS.len()).map(|_| base(&mut rng)).collect();
        let cold = (0..CHANNELS)
            .map(|channel| {
                let mut url = base(&mut rng);
                if rng.below(10) > 0 {
                    // Java's Math.abs(Integer.reverse(channel)), overflow included.
                    let id = (channel as i32).reverse_bits().wrapping_abs();
                    url.push_str(&format!("&channel_id={id}"));
                }
                url
            })
            .collect();
        ChannelUrls { hot, cold }
    })
}

fn string_field(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

fn long_field(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}

fn time_field(name: &str) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Millisecond, None), true)
}

/// The fields of the `person` row.
pub fn person_fields() -> Fields {
    Fields::from(vec![
        long_field("id"),
        string_field("name"),
        string_field("emailAddress"),
        string_field("creditCard"),
        string_field("city"),
        string_field("state"),
        time_field("dateTime"),
        string_field("extra"),
    ])
}

/// The fields of the `auction` row.
pub fn auction_fields() -> Fields {
    Fields::from(vec![
        long_field("id"),
        string_field("itemName"),
        string_field("description"),
        long_field("initialBid"),
        long_field("reserve"),
        time_field("dateTime"),
        time_field("expires"),
        long_field("seller"),
        long_field("category"),
        string_field("extra"),
    ])
}

/// The fields of the `bid` row.
pub fn bid_fields() -> Fields {
    Fields::from(vec![
        long_field("auction"),
        long_field("bidder"),
        long_field("price"),
        string_field("channel"),
        string_field("url"),
        time_field("dateTime"),
        string_field("extra"),
    ])
}

/// Builds the columns `event_type`, `person`, `auction`, `bid` for a run of events.
pub struct EventBatchBuilder {
    config: Arc<GeneratorConfig>,
    event_type: Vec<i32>,
    person: RowBuilder,
    auction: RowBuilder,
    bid: RowBuilder,
}

/// A text column being built: values are written straight into `bytes`, and
/// [`TextColumn::end`] closes each one.
struct TextColumn {
    offsets: Vec<i32>,
    bytes: Vec<u8>,
}

impl TextColumn {
    fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        TextColumn {
            offsets,
            bytes: Vec::with_capacity(bytes),
        }
    }

    /// Closes the value written since the last call.
    #[inline]
    fn end(&mut self) {
        self.offsets.push(self.bytes.len() as i32);
    }

    #[inline]
    fn push(&mut self, value: &[u8]) {
        self.bytes.extend_from_slice(value);
        self.end();
    }

    /// Bytes of the value being written.
    fn current_len(&self) -> usize {
        self.bytes.len() - *self.offsets.last().expect("offsets start with 0") as usize
    }

    fn finish(&mut self, nulls: NullBuffer) -> ArrayRef {
        let rows = self.offsets.len() - 1;
        let done = std::mem::replace(self, TextColumn::with_capacity(rows, self.bytes.len()));
        let array = StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(done.offsets)),
            Buffer::from_vec(done.bytes),
            Some(nulls),
        )
        .expect("generated text is ASCII with increasing offsets");
        Arc::new(array)
    }
}

/// The children of one `ROW` column, and which rows are present.
struct RowBuilder {
    fields: Fields,
    longs: Vec<Vec<i64>>,
    texts: Vec<TextColumn>,
    times: Vec<Vec<i64>>,
    present: BooleanBufferBuilder,
}

impl RowBuilder {
    fn new(fields: Fields, capacity: usize) -> Self {
        let count = |t: fn(&DataType) -> bool| fields.iter().filter(|f| t(f.data_type())).count();
        RowBuilder {
            longs: (0..count(|t| t == &DataType::Int64))
                .map(|_| Vec::with_capacity(capacity))
                .collect(),
            texts: (0..count(|t| t == &DataType::Utf8))
                .map(|_| TextColumn::with_capacity(capacity, capacity * 8))
                .collect(),
            times: (0..count(|t| matches!(t, DataType::Timestamp(_, _))))
                .map(|_| Vec::with_capacity(capacity))
                .collect(),
            present: BooleanBufferBuilder::new(capacity),
            fields,
        }
    }

    /// A row where this column is NULL. Its children get placeholder values
    /// here; `finish` gives them the row's null mask.
    fn append_absent(&mut self) {
        self.longs.iter_mut().for_each(|v| v.push(0));
        self.texts.iter_mut().for_each(TextColumn::end);
        self.times.iter_mut().for_each(|v| v.push(0));
        self.present.append(false);
    }

    fn finish(&mut self) -> ArrayRef {
        let rows = self.present.len();
        // A field of an absent row is NULL, as `person.id` is for an auction in Flink.
        let nulls = NullBuffer::new(self.present.finish());
        let mut longs = self.longs.iter_mut();
        let mut texts = self.texts.iter_mut();
        let mut times = self.times.iter_mut();
        let children: Vec<ArrayRef> = self
            .fields
            .iter()
            .map(|f| -> ArrayRef {
                match f.data_type() {
                    DataType::Int64 => {
                        let values =
                            std::mem::replace(longs.next().expect("long child"), Vec::with_capacity(rows));
                        Arc::new(Int64Array::new(ScalarBuffer::from(values), Some(nulls.clone())))
                    }
                    DataType::Utf8 => texts.next().expect("text child").finish(nulls.clone()),
                    _ => {
                        let values =
                            std::mem::replace(times.next().expect("time child"), Vec::with_capacity(rows));
                        Arc::new(TimestampMillisecondArray::new(
                            ScalarBuffer::from(values),
                            Some(nulls.clone()),
                        ))
                    }
                }
            })
            .collect();
        self.present = BooleanBufferBuilder::new(rows);
        Arc::new(StructArray::new(self.fields.clone(), children, Some(nulls)))
    }
}

impl EventBatchBuilder {
    /// A builder for about `capacity` events.
    pub fn new(config: Arc<GeneratorConfig>, capacity: usize) -> Self {
        EventBatchBuilder {
            config,
            event_type: Vec::with_capacity(capacity),
            person: RowBuilder::new(person_fields(), capacity),
            auction: RowBuilder::new(auction_fields(), capacity),
            bid: RowBuilder::new(bid_fields(), capacity),
        }
    }

    /// Appends event `id`.
    pub fn append(&mut self, id: u64) {
        let kind = self.config.kind(id);
        self.event_type.push(kind as i32);
        let mut rng = EventRng::for_event(id);
        match kind {
            EventKind::Person => {
                self.append_person(id, &mut rng);
                self.auction.append_absent();
                self.bid.append_absent();
            }
            EventKind::Auction => {
                self.person.append_absent();
                self.append_auction(id, &mut rng);
                self.bid.append_absent();
            }
            EventKind::Bid => {
                self.person.append_absent();
                self.auction.append_absent();
                self.append_bid(id, &mut rng);
            }
        }
    }

    /// The four columns of the events appended so far; the builder is then empty.
    pub fn finish(&mut self) -> Vec<ArrayRef> {
        let rows = self.event_type.len();
        let event_type = std::mem::replace(&mut self.event_type, Vec::with_capacity(rows));
        vec![
            Arc::new(Int32Array::from(event_type)),
            self.person.finish(),
            self.auction.finish(),
            self.bid.finish(),
        ]
    }

    fn append_person(&mut self, id: u64, rng: &mut EventRng) {
        let config = &self.config;
        let row = &mut self.person;
        row.longs[0].push(config.last_base0_person_id(id) + FIRST_PERSON_ID);
        let [name, email, card, city, state, extra] = &mut row.texts[..] else {
            unreachable!("a person has six text fields")
        };
        name.bytes
            .extend_from_slice(FIRST_NAMES[rng.below(FIRST_NAMES.len() as u64) as usize].as_bytes());
        name.bytes.push(b' ');
        name.bytes
            .extend_from_slice(LAST_NAMES[rng.below(LAST_NAMES.len() as u64) as usize].as_bytes());
        let mut size = 8 + name.current_len();
        name.end();
        rng.string(7, b' ', &mut email.bytes);
        email.bytes.push(b'@');
        rng.string(5, b' ', &mut email.bytes);
        email.bytes.extend_from_slice(b".com");
        size += email.current_len();
        email.end();
        for group in 0..4 {
            if group > 0 {
                card.bytes.push(b' ');
            }
            let n = rng.below(10_000);
            let _ = write!(card.bytes, "{n:04}");
        }
        size += card.current_len();
        card.end();
        let c = US_CITIES[rng.below(US_CITIES.len() as u64) as usize];
        let s = US_STATES[rng.below(US_STATES.len() as u64) as usize];
        city.push(c.as_bytes());
        state.push(s.as_bytes());
        size += c.len() + s.len();
        row.times[0].push(config.event_time_ms(id));
        rng.extra(size, config.avg_person_size, &mut extra.bytes);
        extra.end();
        row.present.append(true);
    }

    fn append_auction(&mut self, id: u64, rng: &mut EventRng) {
        let config = &self.config;
        let row = &mut self.auction;
        row.longs[0].push(config.last_base0_auction_id(id) + FIRST_AUCTION_ID);
        let seller = if rng.below(config.hot_seller_ratio) > 0 {
            (config.last_base0_person_id(id) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO
        } else {
            config.next_base0_person_id(id, rng)
        };
        let category = FIRST_CATEGORY_ID + rng.below(NUM_CATEGORIES) as i64;
        let initial_bid = rng.price();
        let now = config.event_time_ms(id);
        let expires = now + config.auction_length_ms(id, rng);
        let [item_name, description, extra] = &mut row.texts[..] else {
            unreachable!("an auction has three text fields")
        };
        rng.string(20, b' ', &mut item_name.bytes);
        let mut size = 8 + item_name.current_len();
        item_name.end();
        rng.string(100, b' ', &mut description.bytes);
        size += description.current_len() + 8 * 5;
        description.end();
        let reserve = initial_bid + rng.price();
        row.longs[1].push(initial_bid);
        row.longs[2].push(reserve);
        row.times[0].push(now);
        row.times[1].push(expires);
        row.longs[3].push(seller + FIRST_PERSON_ID);
        row.longs[4].push(category);
        rng.extra(size, config.avg_auction_size, &mut extra.bytes);
        extra.end();
        row.present.append(true);
    }

    fn append_bid(&mut self, id: u64, rng: &mut EventRng) {
        let config = &self.config;
        let row = &mut self.bid;
        let auction = if rng.below(config.hot_auction_ratio) > 0 {
            (config.last_base0_auction_id(id) / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
        } else {
            config.next_base0_auction_id(id, rng)
        };
        let bidder = if rng.below(config.hot_bidder_ratio) > 0 {
            (config.last_base0_person_id(id) / HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
        } else {
            config.next_base0_person_id(id, rng)
        };
        let price = rng.price();
        row.longs[0].push(auction + FIRST_AUCTION_ID);
        row.longs[1].push(bidder + FIRST_PERSON_ID);
        row.longs[2].push(price);
        let [channel, url, extra] = &mut row.texts[..] else {
            unreachable!("a bid has three text fields")
        };
        let urls = channel_urls();
        if rng.below(2) > 0 {
            let i = rng.below(HOT_CHANNELS.len() as u64) as usize;
            channel.push(HOT_CHANNELS[i].as_bytes());
            url.push(urls.hot[i].as_bytes());
        } else {
            let c = rng.below(CHANNELS as u64) as usize;
            let _ = write!(channel.bytes, "channel-{c}");
            channel.end();
            url.push(urls.cold[c].as_bytes());
        }
        row.times[0].push(config.event_time_ms(id));
        rng.extra(32, config.avg_bid_size, &mut extra.bytes);
        extra.end();
        row.present.append(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_proportions_in_every_fifty_events() {
        let config = GeneratorConfig::default();
        for start in [0u64, 50, 12_345 * 50] {
            let kinds: Vec<EventKind> = (start..start + 50).map(|id| config.kind(id)).collect();
            assert_eq!(kinds.iter().filter(|k| **k == EventKind::Person).count(), 1);
            assert_eq!(kinds.iter().filter(|k| **k == EventKind::Auction).count(), 3);
            assert_eq!(kinds.iter().filter(|k| **k == EventKind::Bid).count(), 46);
        }
    }

    #[test]
    fn id_arithmetic_matches_beams_worked_example() {
        let config = GeneratorConfig::default();
        assert_eq!(config.last_base0_person_id(0), 0);
        assert_eq!(config.last_base0_person_id(5_000), 100);
        assert_eq!(config.last_base0_auction_id(1), 0);
        assert_eq!(config.last_base0_auction_id(3), 2);
        assert_eq!(config.last_base0_auction_id(49), 2);
        assert_eq!(config.last_base0_auction_id(51), 3);
        assert_eq!(config.last_base0_auction_id(50), 2);
    }

    #[test]
    fn event_time_is_a_function_of_the_id_alone() {
        let config = GeneratorConfig {
            first_event_rate: 10_000,
            ..Default::default()
        };
        assert_eq!(config.event_time_ms(0), DEFAULT_BASE_TIME_MS);
        assert_eq!(config.event_time_ms(10), DEFAULT_BASE_TIME_MS + 1);
        assert_eq!(config.event_time_ms(10_000), DEFAULT_BASE_TIME_MS + 1000);
    }

    #[test]
    fn prices_are_log_uniform_between_100_and_10_to_the_8() {
        let mut low = 0;
        for id in 0..30_000 {
            let p = EventRng::for_event(id).price();
            assert!((100..=100_000_000).contains(&p));
            if p < 10_000 {
                low += 1;
            }
        }
        // A third of prices lie below 10 000 (two of six decades).
        assert!((9_000..11_000).contains(&low), "{low}");
    }

    #[test]
    fn padding_uses_javas_signed_remainder() {
        let pool = padding_pool();
        assert!(pool.iter().all(|b| (b'H'..=b'z').contains(b)));
        assert!(pool.iter().any(|b| b.is_ascii_uppercase()));
        let mut out = Vec::new();
        EventRng::for_event(3).extra(32, 100, &mut out);
        assert!((54..=81).contains(&out.len()), "{}", out.len());
        let mut again = Vec::new();
        EventRng::for_event(3).extra(32, 100, &mut again);
        assert_eq!(out, again);
    }

    #[test]
    fn channel_urls_are_fixed_and_shaped_like_nexmarks() {
        let urls = channel_urls();
        assert_eq!(urls.cold.len(), CHANNELS);
        assert!(urls.hot.iter().all(|u| u.starts_with("https://www.nexmark.com/")));
        let with_id = urls.cold.iter().filter(|u| u.contains("&channel_id=")).count();
        assert!((8_800..9_200).contains(&with_id), "{with_id}");
        assert!(urls.cold[1].ends_with("&channel_id=-2147483648") || !urls.cold[1].contains("channel_id"));
    }
}
