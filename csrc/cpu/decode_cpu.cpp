// Copyright 2026 The veckm_flow_ros Authors
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

// CPU kernels of the EventPacket decoders (schemas, output conventions and argument checks:
// ../decode.cpp).
//
// The buffers are untrusted: every read is bounded by the buffer length and every write by an
// output size computed from the same buffer in a first counting pass (an upper bound on the
// number of events), so no byte pattern can index outside memory. Time arithmetic is done in
// uint64 so that adversarial rollover counts wrap instead of overflowing a signed integer.
// All formats are little-endian; words are assembled from bytes, independent of the host.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>

#include "../ops.h"

namespace veckm_flow {
namespace {

// Indices into the `stats` output.
constexpr int64_t kStatOutOfBounds = 0;
constexpr int64_t kStatUnknownWords = 1;
constexpr int64_t kStatTrailingBytes = 2;
constexpr int64_t kStatInvalidTimestamps = 3;
constexpr int64_t kNumStats = 4;

constexpr int64_t kEvt3StateSize = 6;
constexpr int64_t kLibcaerCmpStateSize = 3;

// A 24-bit EVT3 time_high step back by at most this many units (4.096 ms each) is jitter,
// not a wrap of the 16.777 s counter.
constexpr uint64_t kEvt3MaxTimeHighJitter = 10;
// libcaer's int32 microsecond counter wraps at 2^31.
constexpr uint64_t kLibcaerWrapNs = (uint64_t{1} << 31) * 1000;

inline uint16_t read_u16(const uint8_t* bytes) {
  return static_cast<uint16_t>(bytes[0] | (bytes[1] << 8));
}

inline uint32_t read_u32(const uint8_t* bytes) {
  return static_cast<uint32_t>(bytes[0]) | (static_cast<uint32_t>(bytes[1]) << 8) |
         (static_cast<uint32_t>(bytes[2]) << 16) | (static_cast<uint32_t>(bytes[3]) << 24);
}

inline uint64_t read_u64(const uint8_t* bytes) {
  return static_cast<uint64_t>(read_u32(bytes)) |
         (static_cast<uint64_t>(read_u32(bytes + 4)) << 32);
}

// Number of set bits of every 12-bit value (x86-64 baseline has no POPCNT instruction, and
// __builtin_popcount would become a library call).
struct Popcount12 {
  uint8_t bits[4096];
  constexpr Popcount12() : bits() {
    for (int v = 1; v < 4096; ++v) {
      bits[v] = static_cast<uint8_t>(bits[v >> 1] + (v & 1));
    }
  }
  constexpr uint8_t operator[](uint32_t v) const { return bits[v]; }
};
constexpr Popcount12 kPopcount12;

// Output columns sized by an upper bound; finish() trims them to what was written.
struct EventColumns {
  at::Tensor t_ns, x, y, p;
  int64_t* t_ptr;
  uint16_t* x_ptr;
  uint16_t* y_ptr;
  uint8_t* p_ptr;
  int64_t count = 0;

  explicit EventColumns(int64_t capacity)
      : t_ns(at::empty({capacity}, at::kLong)),
        x(at::empty({capacity}, at::kUInt16)),
        y(at::empty({capacity}, at::kUInt16)),
        p(at::empty({capacity}, at::kByte)),
        t_ptr(t_ns.data_ptr<int64_t>()),
        x_ptr(static_cast<uint16_t*>(x.data_ptr())),
        y_ptr(static_cast<uint16_t*>(y.data_ptr())),
        p_ptr(p.data_ptr<uint8_t>()) {}

  inline void push(uint64_t t, uint16_t ex, uint16_t ey, uint8_t polarity) {
    t_ptr[count] = static_cast<int64_t>(t);
    x_ptr[count] = ex;
    y_ptr[count] = ey;
    p_ptr[count] = polarity;
    ++count;
  }

  void finish() {
    t_ns = t_ns.narrow(0, 0, count);
    x = x.narrow(0, 0, count);
    y = y.narrow(0, 0, count);
    p = p.narrow(0, 0, count);
  }
};

// The events of one decode call that fall on a width x height sensor, and its counters:
// add() keeps an event inside the sensor and counts one outside; result() trims the columns.
struct SensorEvents {
  EventColumns events;
  const uint32_t width_px;
  const uint32_t height_px;
  int64_t stats[kNumStats];

  SensorEvents(int64_t capacity, int64_t width, int64_t height, int64_t trailing_bytes)
      : events(capacity),
        width_px(check_extent(width, "width")),
        height_px(check_extent(height, "height")),
        stats{0, 0, trailing_bytes, 0} {}

  inline void add(uint64_t t, uint32_t x, uint32_t y, uint8_t polarity) {
    if (x < width_px && y < height_px) {
      events.push(t, static_cast<uint16_t>(x), static_cast<uint16_t>(y), polarity);
    } else {
      ++stats[kStatOutOfBounds];
    }
  }

  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> result() {
    events.finish();
    return {events.t_ns, events.x, events.y, events.p,
            at::tensor(at::ArrayRef<int64_t>(stats, kNumStats), at::kLong)};
  }
};

// ------------------------------------------------------------------------------------------
// EVT 3.0. state = (time_high_us incl. rollover bits, time_low_us, flags, y, base_x, polarity),
// flags bit 0: time valid (a TIME_LOW followed a TIME_HIGH), bit 1: a TIME_HIGH was seen.
enum Evt3Code : uint16_t {
  kEvt3AddrY = 0,
  kEvt3AddrX = 2,
  kEvt3VectBaseX = 3,
  kEvt3Vect12 = 4,
  kEvt3Vect8 = 5,
  kEvt3TimeLow = 6,
  kEvt3Continued4 = 7,
  kEvt3TimeHigh = 8,
  kEvt3Padding = 9,
  kEvt3ExtTrigger = 10,
  kEvt3Others = 14,
  kEvt3Continued12 = 15,
};

inline uint64_t evt3_update_time_high(uint64_t time_high, uint16_t payload) {
  const uint64_t last = (time_high >> 12) & 0xFFF;
  const uint64_t next = payload;
  // A wrap when next < last by more than the jitter; arithmetic, not a branch (this runs for
  // every word of the main loop and is selected afterwards).
  const uint64_t wrap = static_cast<uint64_t>(next + kEvt3MaxTimeHighJitter < last) << 24;
  return ((time_high + wrap) & ~((uint64_t{1} << 24) - 1)) | (next << 12);
}

// Per type code (bits 15..12): which payload bits are event masks (VECT_12: 12, VECT_8: 8),
// how far a vector word moves base_x, and which codes are invalid (1, 11, 12, 13; 7, 9, 14,
// 15 are ignored silently).
constexpr uint16_t kEvt3VectorMask[16] = {0, 0, 0, 0, 0xFFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
constexpr uint8_t kEvt3VectorAdvance[16] = {0, 0, 0, 0, 12, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
constexpr uint8_t kEvt3Invalid[16] = {0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
           at::Tensor>
decode_evt3_cpu(const at::Tensor& buffer, at::Tensor& state, int64_t width, int64_t height) {
  check_buffer(buffer);
  check_state(state, kEvt3StateSize);
  const uint32_t width_px = check_extent(width, "width");
  const uint32_t height_px = check_extent(height, "height");
  const uint8_t* bytes = buffer.data_ptr<uint8_t>();
  const int64_t num_words = buffer.size(0) / 2;

  // Pass 1: upper bounds on CD events and triggers (branch-free: one table lookup per word).
  int64_t max_events = 0;
  int64_t max_triggers = 0;
  for (int64_t i = 0; i < num_words; ++i) {
    const uint16_t word = read_u16(bytes + 2 * i);
    const uint16_t code = word >> 12;
    max_events += kPopcount12[word & kEvt3VectorMask[code]] + (code == kEvt3AddrX);
    max_triggers += code == kEvt3ExtTrigger;
  }

  // One slot of slack: the main loop writes every ADDR_X event and then keeps it or not.
  EventColumns events(max_events + 1);
  at::Tensor trigger_t_ns = at::empty({max_triggers}, at::kLong);
  at::Tensor trigger_channel = at::empty({max_triggers}, at::kByte);
  at::Tensor trigger_edge = at::empty({max_triggers}, at::kByte);
  int64_t* trigger_t_ptr = trigger_t_ns.data_ptr<int64_t>();
  uint8_t* trigger_channel_ptr = trigger_channel.data_ptr<uint8_t>();
  uint8_t* trigger_edge_ptr = trigger_edge.data_ptr<uint8_t>();
  int64_t num_triggers = 0;
  int64_t stats[kNumStats] = {0, 0, buffer.size(0) % 2, 0};

  int64_t* s = state.data_ptr<int64_t>();
  uint64_t time_high = static_cast<uint64_t>(s[0]);
  uint64_t time_low = static_cast<uint64_t>(s[1]) & 0xFFF;
  bool time_valid = (s[2] & 1) != 0;
  bool seen_time_high = (s[2] & 2) != 0;
  uint32_t y = static_cast<uint16_t>(s[3]);
  uint32_t base_x = static_cast<uint16_t>(s[4]);
  uint32_t vector_polarity = static_cast<uint32_t>(s[5] & 1);

  int64_t i = 0;
  // Until the time is known only time words count (as in the reference decoder).
  for (; !time_valid && i < num_words; ++i) {
    const uint16_t word = read_u16(bytes + 2 * i);
    const uint16_t code = word >> 12;
    if (code == kEvt3TimeHigh) {
      time_high = evt3_update_time_high(time_high, word & 0xFFF);
      seen_time_high = true;
    } else if (code == kEvt3TimeLow) {
      time_low = word & 0xFFF;
      time_valid = seen_time_high;
    }
  }

  // Main pass. Word types arrive in no predictable order, so the state updates are written
  // as selects instead of a switch (a mispredicted branch per word costs more than the
  // arithmetic); only vector words and the rare triggers branch.
  int64_t* t_out = events.t_ptr;
  uint16_t* x_out = events.x_ptr;
  uint16_t* y_out = events.y_ptr;
  uint8_t* p_out = events.p_ptr;
  int64_t count = 0;
  int64_t out_of_bounds = 0;
  int64_t invalid_words = 0;
  for (; i < num_words; ++i) {
    const uint32_t word = read_u16(bytes + 2 * i);
    const uint32_t code = word >> 12;
    const uint32_t payload = word & 0xFFF;
    const uint64_t t_ns = (time_high | time_low) * 1000;

    // ADDR_X: write the event unconditionally, keep it when it is an in-bounds ADDR_X.
    const uint32_t x = word & 0x7FF;
    const bool inside = x < width_px && y < height_px;
    const bool is_addr_x = code == kEvt3AddrX;
    t_out[count] = static_cast<int64_t>(t_ns);
    x_out[count] = static_cast<uint16_t>(x);
    y_out[count] = static_cast<uint16_t>(y);
    p_out[count] = static_cast<uint8_t>((word >> 11) & 1);
    count += is_addr_x & inside;
    out_of_bounds += is_addr_x & !inside;

    // VECT_12 / VECT_8: one event per set bit at base_x + bit.
    uint32_t mask = word & kEvt3VectorMask[code];
    if (mask != 0) {
      const bool row_inside = y < height_px;
      do {
        const uint32_t bit = static_cast<uint32_t>(__builtin_ctz(mask));
        mask &= mask - 1;
        const uint32_t vx = (base_x + bit) & 0xFFFF;
        const bool keep = row_inside && vx < width_px;
        t_out[count] = static_cast<int64_t>(t_ns);
        x_out[count] = static_cast<uint16_t>(vx);
        y_out[count] = static_cast<uint16_t>(y);
        p_out[count] = static_cast<uint8_t>(vector_polarity);
        count += keep;
        out_of_bounds += !keep;
      } while (mask != 0);
    }
    if (code == kEvt3ExtTrigger) {
      trigger_t_ptr[num_triggers] = static_cast<int64_t>(t_ns);
      trigger_channel_ptr[num_triggers] = (word >> 8) & 0xF;
      trigger_edge_ptr[num_triggers] = word & 1;
      ++num_triggers;
    }

    // State updates as selects.
    const bool is_base = code == kEvt3VectBaseX;
    base_x = is_base ? (word & 0x7FF) : ((base_x + kEvt3VectorAdvance[code]) & 0xFFFF);
    vector_polarity = is_base ? ((word >> 11) & 1) : vector_polarity;
    y = code == kEvt3AddrY ? (word & 0x7FF) : y;
    time_low = code == kEvt3TimeLow ? payload : time_low;
    const uint64_t next_high = evt3_update_time_high(time_high, static_cast<uint16_t>(payload));
    time_high = code == kEvt3TimeHigh ? next_high : time_high;
    invalid_words += kEvt3Invalid[code];
  }
  events.count = count;
  stats[kStatOutOfBounds] = out_of_bounds;
  stats[kStatUnknownWords] = invalid_words;

  s[0] = static_cast<int64_t>(time_high);
  s[1] = static_cast<int64_t>(time_low);
  s[2] = (time_valid ? 1 : 0) | (seen_time_high ? 2 : 0);
  s[3] = y;
  s[4] = base_x;
  s[5] = vector_polarity;

  events.finish();
  return {events.t_ns,
          events.x,
          events.y,
          events.p,
          trigger_t_ns.narrow(0, 0, num_triggers),
          trigger_channel.narrow(0, 0, num_triggers),
          trigger_edge.narrow(0, 0, num_triggers),
          at::tensor(at::ArrayRef<int64_t>(stats, kNumStats), at::kLong)};
}

// ------------------------------------------------------------------------------------------
// libcaer_cmp. state = (x, base_y, polarity); the time restarts at time_base_ns per message.
enum LibcaerCmpCode : uint16_t {
  kCmpTimeHigh = 0,
  kCmpTimeLow = 1,
  kCmpAddrX = 2,
  kCmpAddrY = 3,
  kCmpVectBaseY = 4,
  kCmpVect8 = 5,
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> decode_libcaer_cmp_cpu(
    const at::Tensor& buffer, at::Tensor& state, int64_t time_base_ns, int64_t width,
    int64_t height) {
  check_buffer(buffer);
  check_state(state, kLibcaerCmpStateSize);
  check_extent(width, "width");
  check_extent(height, "height");
  const uint8_t* bytes = buffer.data_ptr<uint8_t>();
  const int64_t num_words = buffer.size(0) / 2;

  int64_t max_events = 0;
  for (int64_t i = 0; i < num_words; ++i) {
    const uint16_t word = read_u16(bytes + 2 * i);
    const uint16_t code = word >> 12;
    max_events += code == kCmpAddrY ? 1 : (code == kCmpVect8 ? kPopcount12[word & 0xFF] : 0);
  }

  SensorEvents out(max_events, width, height, buffer.size(0) % 2);
  int64_t* s = state.data_ptr<int64_t>();
  uint16_t x = static_cast<uint16_t>(s[0]);
  uint16_t base_y = static_cast<uint16_t>(s[1]);
  uint8_t vector_polarity = static_cast<uint8_t>(s[2] & 1);
  const uint64_t time_base = static_cast<uint64_t>(time_base_ns);
  uint64_t time_high = 0;
  uint64_t time_low = 0;

  for (int64_t i = 0; i < num_words; ++i) {
    const uint16_t word = read_u16(bytes + 2 * i);
    switch (word >> 12) {
      case kCmpTimeHigh:
        time_high = static_cast<uint64_t>(word & 0xFFF) << 12;
        break;
      case kCmpTimeLow:
        time_low = word & 0xFFF;
        break;
      case kCmpAddrX:
        x = word & 0x7FF;
        break;
      case kCmpAddrY: {
        out.add(time_base + (time_high | time_low) * 1000, x, word & 0x7FF, (word >> 11) & 1);
        break;
      }
      case kCmpVectBaseY:
        base_y = word & 0x7FF;
        vector_polarity = (word >> 11) & 1;
        break;
      case kCmpVect8: {
        uint32_t mask = word & 0xFF;
        const uint64_t t = time_base + (time_high | time_low) * 1000;
        while (mask != 0) {
          const int bit = __builtin_ctz(mask);
          mask &= mask - 1;
          out.add(t, x, static_cast<uint16_t>(base_y + bit), vector_polarity);
        }
        base_y = static_cast<uint16_t>(base_y + 8);
        break;
      }
      default:
        ++out.stats[kStatUnknownWords];
        break;
    }
  }

  s[0] = x;
  s[1] = base_y;
  s[2] = vector_polarity;
  return out.result();
}

// ------------------------------------------------------------------------------------------
// libcaer: 8 bytes per event, uint32 data (polarity bit 1, y bits 16..2, x bits 31..17) and
// int32 ts_us. A negative ts_us is invalid (libcaer counts from 0); a decrease is a wrap.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> decode_libcaer_cpu(
    const at::Tensor& buffer, int64_t time_base_ns, int64_t width, int64_t height) {
  check_buffer(buffer);
  const uint8_t* bytes = buffer.data_ptr<uint8_t>();
  const int64_t num_records = buffer.size(0) / 8;

  SensorEvents out(num_records, width, height, buffer.size(0) % 8);
  uint64_t time_high = static_cast<uint64_t>(time_base_ns);
  int64_t last_ts_us = 0;
  for (int64_t i = 0; i < num_records; ++i) {
    const uint32_t data = read_u32(bytes + 8 * i);
    const int64_t ts_us = static_cast<int32_t>(read_u32(bytes + 8 * i + 4));
    if (ts_us < 0) {
      ++out.stats[kStatInvalidTimestamps];
      continue;
    }
    if (ts_us < last_ts_us) {
      time_high += kLibcaerWrapNs;
    }
    last_ts_us = ts_us;
    out.add(time_high + static_cast<uint64_t>(ts_us) * 1000, (data >> 17) & 0x7FFF,
            (data >> 2) & 0x7FFF, (data >> 1) & 1);
  }
  return out.result();
}

// ------------------------------------------------------------------------------------------
// mono: uint64 per event: dt_ns bits 31..0, x bits 47..32, y bits 62..48, polarity bit 63.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> decode_mono_cpu(
    const at::Tensor& buffer, int64_t time_base_ns, int64_t width, int64_t height) {
  check_buffer(buffer);
  const uint8_t* bytes = buffer.data_ptr<uint8_t>();
  const int64_t num_records = buffer.size(0) / 8;

  SensorEvents out(num_records, width, height, buffer.size(0) % 8);
  const uint64_t time_base = static_cast<uint64_t>(time_base_ns);
  for (int64_t i = 0; i < num_records; ++i) {
    const uint64_t word = read_u64(bytes + 8 * i);
    out.add(time_base + (word & 0xFFFFFFFFu), static_cast<uint16_t>(word >> 32),
            static_cast<uint16_t>((word >> 48) & 0x7FFF), static_cast<uint8_t>(word >> 63));
  }
  return out.result();
}

// trigger: the mono layout with the channel in bits 62..48 (kept modulo 256) and edge bit 63.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> decode_trigger_cpu(
    const at::Tensor& buffer, int64_t time_base_ns) {
  check_buffer(buffer);
  const uint8_t* bytes = buffer.data_ptr<uint8_t>();
  const int64_t num_records = buffer.size(0) / 8;
  at::Tensor t_ns = at::empty({num_records}, at::kLong);
  at::Tensor channel = at::empty({num_records}, at::kByte);
  at::Tensor edge = at::empty({num_records}, at::kByte);
  int64_t* t_ptr = t_ns.data_ptr<int64_t>();
  uint8_t* channel_ptr = channel.data_ptr<uint8_t>();
  uint8_t* edge_ptr = edge.data_ptr<uint8_t>();
  const uint64_t time_base = static_cast<uint64_t>(time_base_ns);
  for (int64_t i = 0; i < num_records; ++i) {
    const uint64_t word = read_u64(bytes + 8 * i);
    t_ptr[i] = static_cast<int64_t>(time_base + (word & 0xFFFFFFFFu));
    channel_ptr[i] = static_cast<uint8_t>((word >> 48) & 0xFF);
    edge_ptr[i] = static_cast<uint8_t>(word >> 63);
  }
  const int64_t stats[kNumStats] = {0, 0, buffer.size(0) % 8, 0};
  return {t_ns, channel, edge, at::tensor(at::ArrayRef<int64_t>(stats, kNumStats), at::kLong)};
}

}  // namespace

TORCH_LIBRARY_IMPL(veckm_flow, CPU, m) {
  m.impl("decode_evt3", &decode_evt3_cpu);
  m.impl("decode_libcaer_cmp", &decode_libcaer_cmp_cpu);
  m.impl("decode_libcaer", &decode_libcaer_cpu);
  m.impl("decode_mono", &decode_mono_cpu);
  m.impl("decode_trigger", &decode_trigger_cpu);
}

}  // namespace veckm_flow
