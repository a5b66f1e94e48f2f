# Copyright 2026 The veckm_flow_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""The result of the streaming estimator: the normal flows of one block of target events."""

import dataclasses
from typing import List, Optional

import numpy as np


@dataclasses.dataclass
class FlowBlock:
    """
    Normal flow of the target events of one block (M flows).

    event_index int64[M]: index of the target in the stream of all events pushed since
    construction or the last reset (counting from 0); t_ns int64[M]: sensor time;
    x, y uint16[M]: pixel (x right, y down); u_px_s, v_px_s float32[M]: normal flow in px/s
    along x and y; confidence float32[M] or None; t_newest_ns: newest sensor time pushed
    when the block was computed; ready_ns: the end of its context window, the sensor time the
    stream had to reach before the block could be computed (a caller that pushes several
    packets at once finds the packet that completed it; None for blocks built by hand);
    validity float32[M] in [0, 1) (core/validity.py; higher = more moving structure around
    the event) or None for blocks built by hand; low_validity: flows of the block left out
    because their validity was below the estimator's min_validity; long_context: flows of the
    block estimated again with the long context (long_context_below_px_s);
    long_context_skipped: 1 if the block was computed without that second look although it
    is on (long_context_active was False: a live caller that was behind), else 0.
    """

    event_index: np.ndarray
    t_ns: np.ndarray
    x: np.ndarray
    y: np.ndarray
    u_px_s: np.ndarray
    v_px_s: np.ndarray
    t_newest_ns: int
    confidence: Optional[np.ndarray] = None
    ready_ns: Optional[int] = None
    validity: Optional[np.ndarray] = None
    low_validity: int = 0
    long_context: int = 0
    long_context_skipped: int = 0

    def __len__(self):
        return len(self.event_index)

    @staticmethod
    def concatenate(blocks: List['FlowBlock']) -> 'FlowBlock':
        """Join blocks into one (t_newest_ns of the last); an empty list gives an empty block."""
        if not blocks:
            return FlowBlock(np.empty(0, np.int64), np.empty(0, np.int64),
                             np.empty(0, np.uint16), np.empty(0, np.uint16),
                             np.empty(0, np.float32), np.empty(0, np.float32), 0)

        def join(name):
            if any(getattr(block, name) is None for block in blocks):
                return None
            return np.concatenate([getattr(block, name) for block in blocks])
        return FlowBlock(join('event_index'), join('t_ns'), join('x'), join('y'),
                         join('u_px_s'), join('v_px_s'), blocks[-1].t_newest_ns,
                         confidence=join('confidence'), validity=join('validity'),
                         low_validity=sum(block.low_validity for block in blocks),
                         long_context=sum(block.long_context for block in blocks),
                         long_context_skipped=sum(block.long_context_skipped
                                                  for block in blocks))
