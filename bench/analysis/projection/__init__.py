"""Scaling projected past this machine, from the ceilings a run measured (docs/design.md, "Projection").

Per rank and step, a scale of N GPUs spends the time one GPU needs for its batch (from the measured 1-rank
rate, or the node ceiling per rank), plus the part of the gradient allreduce that backward does not hide:

    step(N)    = batch / compute_img_s + exposed_fraction x allreduce(N)
    images/s   = min(N x batch / step(N), storage_ceiling / bytes_per_image)
    efficiency = images/s / (N x one-rank images/s)

The allreduce follows nccl-tests' doc/PERFORMANCE.md: an allreduce of S bytes over n ranks, each with bus
bandwidth B to the others, moves 2(n-1)/n x S through every rank's link whatever the algorithm, so at best
t = (S/B) x 2(n-1)/n, and busbw = algbw x 2(n-1)/n = S/t x 2(n-1)/n. The latency term is the algorithm's
(alpha = one hop's latency, k buckets of S/k bytes; Thakur, Rabenseifner and Gropp 2005):

    ring: k x 2(n-1) x alpha + (S/B) x 2(n-1)/n      (reduce-scatter then all-gather, n-1 steps each)
    tree: k x 2 ceil(log2 n) x alpha + (S/B) x 2(n-1)/n   (reduce up and broadcast down a binary tree)

B is a GPU's bus bandwidth inside a node (`intra_node_link`) while the scale fits one node, and across
nodes the lower of that and the node's network (`inter_node_link`, all its NICs): a ring laid node after
node sends the same bytes over every edge, and a node's edges out share its NICs.

Four rooms, imported one way: `allreduce` (the collective's cost model, nccl-tests' terms), `model` (a
scale on a fabric: compute, exposed communication, storage), `inputs` (ceilings read from a run's
results and from flags) and `project` (the two together, per workload). Pure functions over plain
values and frames: the CLI (`bench/cli/project.py`) reads files and flags.
"""
