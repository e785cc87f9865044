# SPDX-License-Identifier: Apache-2.0
"""``python -m vllm_myops.cli``: the same as the ``vllm-myops`` script."""

from vllm_myops.cli import main

raise SystemExit(main())
