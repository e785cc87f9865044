// SPDX-License-Identifier: Apache-2.0
//
// Counters for kernels that merge their own splits (split-K or split
// sequence) in one launch, without a memset per call.
//
// Such a kernel counts its finished splits per output tile with an atomic;
// the split that counts last merges them and stores 0 back. So a counter is
// 0 again whenever a launch has ended, and the next launch that uses it
// needs no memset (before: a memset node in front of every such kernel under
// CUDA graphs, a second link in batch 1's latency chain) and no second
// kernel for the merge.
//
// That needs memory that (a) is zero before its first use, (b) lives as long
// as any launch or captured graph may use it, (c) is never used by two
// launches that may run at the same time. Here:
// (a) regions come from cudaMalloc, zeroed by a memset on the caller's
//     stream (ordered before the launch, no host wait); under stream capture
//     a memset there would be a graph node, so it runs on a private stream
//     that the host waits for (once per captured graph and region size; no
//     wait on the caller's stream), both in relaxed capture mode (neither is
//     a stream operation of the capture);
//     cudaMalloc itself may wait for the device: once per region, like the
//     caching allocator's first allocations (torch's sync debug mode does
//     not see it);
// (b) regions are never freed (a few KB per stream and per captured graph);
// (c) one region per (device, stream, capture sequence): eager launches on
//     one stream are ordered by the stream; each captured graph has its own
//     region (layers inside one graph are ordered on the capture stream;
//     forked capture streams get their own), and CUDA orders the launches
//     of one executable graph. Not covered: work still running on a stream
//     that was destroyed while a new stream got the same handle.
// A kernel that faults leaves counters non-zero, but the CUDA context is
// lost then anyway.

#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

namespace vllm_myops::cuda {

// At least `count` zeroed int counters for a launch on `stream` of the
// current device, left zeroed by every launch that uses them. Kernels of
// different ops may share a region: launches on one stream (or in one
// captured graph) run one after another, each leaving it zeroed.
inline int* split_counters(cudaStream_t stream, int64_t count) {
  struct Region {
    int* ptr = nullptr;
    int64_t count = 0;
  };
  static std::mutex mutex;
  static std::map<std::tuple<int, cudaStream_t, unsigned long long>, Region>
      regions;
  static std::map<int, cudaStream_t> zero_streams;  // per device

  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture_id));
  const bool capturing = status != cudaStreamCaptureStatusNone;
  if (!capturing) capture_id = 0;

  const std::lock_guard<std::mutex> lock(mutex);
  Region& region = regions[{device, stream, capture_id}];
  if (region.count >= count) return region.ptr;

  // Grow (doubling, at least 1024): the old region stays allocated, launches
  // or graphs enqueued before may still use it.
  int64_t grown = std::max<int64_t>(1024, region.count);
  while (grown < count) grown *= 2;
  // Relaxed capture mode for this thread while allocating, restored however
  // the block is left (a failed check throws).
  struct RelaxedCapture {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    RelaxedCapture() {
      C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    }
    ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
  } relaxed;
  cudaStream_t& zero_stream = zero_streams[device];
  if (capturing && zero_stream == nullptr) {
    C10_CUDA_CHECK(
        cudaStreamCreateWithFlags(&zero_stream, cudaStreamNonBlocking));
  }
  int* ptr = nullptr;
  C10_CUDA_CHECK(cudaMalloc(&ptr, grown * sizeof(int)));
  if (!capturing) {
    C10_CUDA_CHECK(cudaMemsetAsync(ptr, 0, grown * sizeof(int), stream));
  } else {
    C10_CUDA_CHECK(cudaMemsetAsync(ptr, 0, grown * sizeof(int), zero_stream));
    C10_CUDA_CHECK(cudaStreamSynchronize(zero_stream));
  }
  region.ptr = ptr;
  region.count = grown;
  return ptr;
}

}  // namespace vllm_myops::cuda
