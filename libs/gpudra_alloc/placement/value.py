"""How placeable a node's free capacity still is: one number, the *placeability value*.

Placement picks the candidate allocation that loses the least value (`docs/PLACEMENT.md` gives
the reasons for every weight). The value of a node's free state is the sum of:

- NVLink blocks: each NVLink domain's free whole GPUs are cut greedily into blocks of 8, 4, 2
  and 1 GPUs worth 14, 5, 2.2 and 1 (per block). A block is worth more than its GPUs apart, so
  taking one GPU from an intact 8-block costs 5.8 while taking one from a domain with 5 free
  costs 1 (each + 1.0 in a large domain, below): best fit by domain, and whole domains stay whole. PCIe-only GPUs form blocks of at
  most 2 (nothing larger can use them).
- Large NVLink domains (>= 8 GPUs: DGX H100, HGX B200, A100): every free GPU there adds 1.0
  more, so 1/2/4-GPU work goes to a GB200 tray, a PCIe GPU or a 4-GPU domain before it takes
  GPUs of a domain only 8-GPU claims can use whole (a 4-GPU claim fills a whole tray, loss 8.0,
  rather than the last 4 free GPUs of a DGX, loss 9.8).
- Scarce GPU kinds (what each node type is precious for): every free GPU with >= 150 GiB memory
  adds 0.3 (only those take the large-memory claims), every free GPU of compute capability
  >= 9.0 with >= 40 GiB adds 0.2, every free whole MIG-capable GPU adds 0.5 (only those take
  MIG claims).
- Fabric cliques: a node whose GPUs of a clique are all free adds 1.0 (racks kept whole for
  multi-node gangs).
- Whole small NVLink domains (GB200 trays), only when asked (`whole_tray` > 0, off by default:
  measured in `docs/PLACEMENT.md`, round 3): + `whole_tray` per tray with all GPUs free.
- Partitioned GPUs (MIG): 0.05 per free counter plus 0.2 while a half-GPU partition still fits.
  A freshly partitioned GPU is therefore worth at most 0.55, less than the whole GPU it was, so
  MIG packs onto GPUs already partitioned and breaks a whole GPU only when none has room.
- Slice packing, only when asked (`slice_packing` P > 0): + P x (free counters / counters)^2 per
  partitioned GPU. Convex, so a slice costs least on the partitioned GPU with the fewest free
  counters (best fit: the emptier ones drain back to whole GPUs); at most P more per GPU.

A node's value depends on that node's free state only (its `NodeView`: GPU attributes and the
size of each NVLink domain; and its `FreeState`): no other
node, no queue, no claim. What a candidate may take besides depends on the whole-domain reserve
(`Chooser.held_domains`: held domains and the MIG home's guard, both fleet-wide); that enters a
node's search only through its `held_on` entry, which node keys and memo keys include.
"""

from __future__ import annotations

from gpudra_alloc.placement.topology import PCIE, FreeState, NodeView

BLOCKS: tuple[tuple[int, float], ...] = ((8, 14.0), (4, 5.0), (2, 2.2), (1, 1.0))
PCIE_BLOCKS: tuple[tuple[int, float], ...] = ((2, 2.2), (1, 1.0))
LARGE_MEMORY_GIB = 150.0
LARGE_MEMORY_VALUE = 0.3
HOPPER_PLUS_VALUE = 0.2
HOPPER_PLUS_MIN_GIB = 40.0
WHOLE_CLIQUE_VALUE = 1.0
PARTITIONABLE_VALUE = 0.5
PARTITION_COUNTER_VALUE = 0.05
PARTITION_HALF_VALUE = 0.2
LARGE_DOMAIN_SIZE = 8  # GPUs: an NVLink domain that can take an 8-GPU claim
LARGE_DOMAIN_GPU_VALUE = 1.0


def block_value(free: int, blocks: tuple[tuple[int, float], ...] = BLOCKS) -> float:
    total = 0.0
    for size, worth in blocks:
        n, free = divmod(free, size)
        total += n * worth
    return total


def node_value(
    view: NodeView, free: FreeState, whole_tray: float = 0.0, slice_packing: float = 0.0
) -> float:
    """`whole_tray`: added per small NVLink domain (fewer than LARGE_DOMAIN_SIZE GPUs, a GB200
    tray) whose GPUs are all free (0: the default rules; measured in `docs/PLACEMENT.md`).
    `slice_packing`: P of the convex term per partitioned GPU (0: not valued)."""
    total = 0.0
    for domain, count in free.domains.items():
        total += block_value(count, PCIE_BLOCKS if domain == PCIE else BLOCKS)
        if domain == PCIE:
            continue
        size = view.domain_sizes.get(domain, 0)
        if size >= LARGE_DOMAIN_SIZE:
            total += LARGE_DOMAIN_GPU_VALUE * count
        elif whole_tray and count == size:
            total += whole_tray
    clique_free: dict[str, int] = {}
    for gpu in free.gpus:
        if gpu.memory_gib >= LARGE_MEMORY_GIB:
            total += LARGE_MEMORY_VALUE
        if gpu.compute >= (9, 0) and gpu.memory_gib >= HOPPER_PLUS_MIN_GIB:
            total += HOPPER_PLUS_VALUE
        if gpu.counter_set is not None:
            total += PARTITIONABLE_VALUE
        if gpu.clique:
            clique_free[gpu.clique] = clique_free.get(gpu.clique, 0) + 1
    for clique, count in clique_free.items():
        if count == sum(1 for g in view.gpus if g.clique == clique):
            total += WHOLE_CLIQUE_VALUE
    for key, (counters, half) in free.partitioned.items():
        total += PARTITION_COUNTER_VALUE * counters + (PARTITION_HALF_VALUE if half else 0.0)
        if slice_packing:
            total += slice_packing * (counters / len(view.counter_names[key])) ** 2
    return total
