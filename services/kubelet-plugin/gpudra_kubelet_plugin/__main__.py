"""`python -m gpudra_kubelet_plugin`: run the kubelet plugin service."""

from __future__ import annotations

import sys

from gpudra_kubelet_plugin.main import main

sys.exit(main())
