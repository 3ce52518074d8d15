"""Static analysis of NVIDIA SASS for benchmarks/sass_report.py: the disassembly (``nvdisasm -g``)
as functions of instructions with their source lines, each function's control-flow graph and
natural loops, issued warp-instructions from loop trip counts, and theoretical occupancy.

Nothing here runs on a GPU or knows about FLIP; the report supplies the trip counts. Counting
rules (what "issued warp-instructions" means here):

* every instruction on the counted path is one issue, predicated-off ones included (a warp issues
  them);
* one loop iteration costs its heaviest path from the loop header to the end of the iteration
  (back to the header or out of the loop), an inner loop costing its trip count times its own
  iteration (and times the probability that the iteration enters it at all); branches that a
  whole warp takes one way (the input mode, the tone mapper) are therefore counted once, on their
  heavier side;
* blocks that call the compiler's slow paths (``CALL`` to a ``$__internal_*`` subroutine:
  division and square root of denormal or special operands) count zero: the fast path is taken;
* a source loop that the compiler unrolled into a cascade (a loop by 16, one step of 8, a loop by
  4, a tail of single steps: see ``cascade_counts``) has each piece executed as often as the
  source loop's trip count makes it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Callable, Iterable, Optional

# ---- the disassembly ------------------------------------------------------------------------

_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[0-7T]\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?)\s*;")
_LABEL = re.compile(r"^(\.L_x_\d+|\$[^:\s]+):\s*$")
_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_TARGET = re.compile(r"`\(([^)]+)\)")
_SECTION = re.compile(r"^\.text\.(\S+):\s*$")

# Opcodes that end a basic block. BRA/JMP/BRX/JMX transfer control; EXIT/RET/KILL end the thread
# (predicated: only for some lanes, so the block also falls through).
_BRANCHES = {"BRA", "JMP"}
_INDIRECT = {"BRX", "JMX"}
_ENDS = {"EXIT", "RET", "KILL"}
FMA_OPCODES = {"FFMA", "DFMA"}


@dataclasses.dataclass
class Instruction:
    address: int
    predicate: str  # "" when unconditional
    opcode: str  # with modifiers, e.g. "ISETP.GE.AND"
    operands: str
    file: str  # innermost source file of the instruction ("" without line information)
    line: int
    target: Optional[str] = None  # the label a branch or call names

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]


@dataclasses.dataclass
class Function:
    name: str
    instructions: list
    labels: dict  # label -> index of the instruction it names


def parse_nvdisasm(text: str) -> dict:
    """The functions of ``nvdisasm -c -g`` output (also ``-gi``: the first file/line of each
    annotation group, the innermost, is kept) by section name."""
    functions = {}
    current = None
    file, line = "", 0
    fresh_group = True
    for raw in text.splitlines():
        m = _SECTION.match(raw)
        if m:
            current = Function(m.group(1), [], {})
            functions[current.name] = current
            file, line, fresh_group = "", 0, True
            continue
        if current is None:
            continue
        m = _LINE.search(raw)
        if m:
            if fresh_group:  # -gi prints the inlining chain innermost first
                file, line = m.group(1), int(m.group(2))
                fresh_group = False
            continue
        m = _LABEL.match(raw)
        if m:
            current.labels[m.group(1)] = len(current.instructions)
            continue
        m = _INSTRUCTION.match(raw)
        if m:
            fresh_group = True
            operands = m.group(4)
            t = _TARGET.search(operands)
            current.instructions.append(
                Instruction(
                    int(m.group(1), 16),
                    (m.group(2) or "").strip(),
                    m.group(3),
                    operands,
                    file,
                    line,
                    t.group(1) if t else None,
                )
            )
    return functions


# ---- control flow ---------------------------------------------------------------------------


@dataclasses.dataclass
class Block:
    index: int
    start: int  # first instruction (index into Function.instructions)
    end: int  # one past the last
    successors: list = dataclasses.field(default_factory=list)
    predecessors: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Loop:
    header: int  # block index
    blocks: set  # block indices, the header and every nested loop's included
    latches: list  # blocks with a back edge to the header
    parent: Optional["Loop"] = None
    children: list = dataclasses.field(default_factory=list)
    own: set = dataclasses.field(default_factory=set)  # blocks not in a nested loop

    def depth(self) -> int:
        return 0 if self.parent is None else 1 + self.parent.depth()


class Cfg:
    """Basic blocks, edges, the blocks reachable from the entry and the natural loops of one
    function. ``problems`` lists what the analysis could not model (indirect branches, irreducible
    control flow): a caller should not trust counts for a function with problems."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.problems = []
        ins = fn.instructions
        leaders = {0} | {i for i in fn.labels.values() if i < len(ins)}
        for i, x in enumerate(ins):
            if x.base in _BRANCHES or x.base in _INDIRECT or x.base in _ENDS:
                leaders.add(i + 1)
        leaders = sorted(i for i in leaders if i < len(ins))
        self.blocks = [Block(k, s, e) for k, (s, e) in enumerate(zip(leaders, leaders[1:] + [len(ins)]))]
        self.block_of = {}
        for b in self.blocks:
            for i in range(b.start, b.end):
                self.block_of[i] = b.index
        for b in self.blocks:
            last = ins[b.end - 1]
            falls = True
            if last.base in _BRANCHES:
                if last.target not in fn.labels:
                    self.problems.append(f"branch at {last.address:#x} to unknown label {last.target}")
                else:
                    self._edge(b.index, self.block_of[fn.labels[last.target]])
                falls = bool(last.predicate)
            elif last.base in _INDIRECT:
                self.problems.append(f"indirect branch at {last.address:#x}: its targets are not followed")
                falls = False
            elif last.base in _ENDS:
                falls = bool(last.predicate)
            if falls and b.end < len(ins):
                self._edge(b.index, b.index + 1)
        self.reachable = self._reachable()
        self.dominators = self._dominators()
        self.loops = self._loops()

    def _edge(self, a, b):
        if b not in self.blocks[a].successors:
            self.blocks[a].successors.append(b)
            self.blocks[b].predecessors.append(a)

    def _reachable(self):
        seen, stack = {0}, [0]
        while stack:
            for s in self.blocks[stack.pop()].successors:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return seen

    def _dominators(self):
        order = self.reverse_postorder()
        full = set(order)
        dom = {b: set(full) for b in order}
        dom[0] = {0}
        changed = True
        while changed:
            changed = False
            for b in order[1:]:
                preds = [p for p in self.blocks[b].predecessors if p in full]
                new = set.intersection(*(dom[p] for p in preds)) | {b} if preds else {b}
                if new != dom[b]:
                    dom[b] = new
                    changed = True
        return dom

    def reverse_postorder(self):
        seen, post = set(), []

        def visit(b):
            stack = [(b, iter(self.blocks[b].successors))]
            seen.add(b)
            while stack:
                node, it = stack[-1]
                nxt = next((s for s in it if s not in seen), None)
                if nxt is None:
                    post.append(node)
                    stack.pop()
                else:
                    seen.add(nxt)
                    stack.append((nxt, iter(self.blocks[nxt].successors)))

        visit(0)
        return post[::-1]

    def _loops(self):
        by_header = {}
        rpo = {b: k for k, b in enumerate(self.reverse_postorder())}
        for b in self.reachable:
            for s in self.blocks[b].successors:
                if s in self.dominators[b]:  # a back edge: its target dominates its source
                    by_header.setdefault(s, []).append(b)
                elif rpo[s] <= rpo[b]:
                    self.problems.append(
                        f"irreducible control flow: retreating edge {self.address(b):#x} -> {self.address(s):#x}"
                    )
        loops = []
        for h, latches in by_header.items():
            body, stack = {h}, [x for x in latches if x != h]
            body |= set(stack)
            while stack:
                for p in self.blocks[stack.pop()].predecessors:
                    if p in self.reachable and p not in body:
                        body.add(p)
                        stack.append(p)
            loops.append(Loop(h, body, sorted(latches)))
        loops.sort(key=lambda lp: len(lp.blocks))
        for k, inner in enumerate(loops):
            for outer in loops[k + 1 :]:
                if inner.blocks < outer.blocks:
                    inner.parent = outer
                    outer.children.append(inner)
                    break
        for lp in loops:
            lp.children.sort(key=lambda c: self.address(c.header))
            lp.own = set(lp.blocks) - set().union(*(c.blocks for c in lp.children))
        return sorted((lp for lp in loops if lp.parent is None), key=lambda lp: self.address(lp.header))

    def address(self, block: int) -> int:
        return self.fn.instructions[self.blocks[block].start].address

    def instructions(self, blocks: Iterable[int]):
        for b in sorted(blocks):
            yield from self.fn.instructions[self.blocks[b].start : self.blocks[b].end]

    def size(self, blocks: Iterable[int]) -> int:
        return sum(self.blocks[b].end - self.blocks[b].start for b in blocks)

    def fma_count(self, blocks: Iterable[int]) -> int:
        return sum(1 for x in self.instructions(blocks) if x.base in FMA_OPCODES)

    def latch_location(self, loop: Loop):
        """The source file and line of the branch that closes the loop (its last latch)."""
        last = max(loop.latches, key=self.address)
        x = self.fn.instructions[self.blocks[last].end - 1]
        return x.file, x.line

    def calls_slow_path(self, block: int) -> bool:
        return any(x.base == "CALL" and (x.target or "").startswith("$__internal") for x in self.instructions([block]))

    def all_loops(self):
        stack = list(self.loops)
        while stack:
            lp = stack.pop()
            yield lp
            stack.extend(lp.children)


# ---- unrolled cascades ----------------------------------------------------------------------


def cascade_counts(trips: int, pieces: list) -> tuple:
    """How often each piece of a source loop unrolled into a cascade runs, given the source loop's
    trip count. pieces: (kind, steps, optional) in code order; kind "loop" (repeats while at least
    `steps` iterations remain) or "step" (straight-line code that runs once), steps the source
    iterations one run always does and optional the ones it does only when that many remain
    (predicated multiply-adds: a tail step covering one or two iterations).

    The compiler unrolls by U (the smallest loop step): n mod U iterations run in remainder steps
    (before or after the loops), the rest in the loops and steps whose size is a multiple of U,
    largest first (e.g. a loop by 16, a step of 8, a loop by 4). Each part is taken greedily in code
    order. Returns (runs per piece, iterations left over); left over > 0 means the pieces cannot be
    this loop's."""
    loop_steps = [s for k, s, _ in pieces if k == "loop" and s > 0]
    unit = min(loop_steps) if loop_steps else 1
    main = trips - trips % unit if loop_steps else 0
    rest = trips - main
    runs = []
    for kind, steps, optional in pieces:
        size = steps + optional
        is_main = kind == "loop" or (loop_steps and size % unit == 0 and optional == 0)
        left = main if is_main else rest
        if kind == "loop":
            n = left // steps if steps > 0 else 0
            used = n * steps
        elif size > 0 and left >= max(steps, 1):
            n = 1
            used = steps + min(optional, left - steps)
        else:
            n, used = 0, 0
        runs.append(n)
        if is_main:
            main -= used
        else:
            rest -= used
    return runs, main + rest


# ---- cost of a function ---------------------------------------------------------------------


@dataclasses.dataclass
class LoopCount:
    """What the report says about one SASS loop: the number of iterations per entry (per warp, may
    be fractional: an average over the warps of a block) and the probability that one iteration of
    the enclosing code enters it."""

    trips: float
    entry: float = 1.0


def primary(value) -> float:
    """What heaviest_path compares paths by: the number itself, or a Counts' issued instructions."""
    return value["instructions"] if isinstance(value, Counts) else value


def heaviest_path(
    cfg: Cfg, loop: Optional[Loop], weight: Callable[[int], float], loop_cost: Callable[[Loop], float]
) -> float:
    """The largest total weight of a path through one iteration of `loop` (None: the function
    body from its entry to an exit), nested loops taken as single nodes of weight loop_cost(child).
    The graph of one iteration is acyclic when the control flow is reducible. Weights may be
    numbers or Counts (per-pipe costs): a path is then chosen by its issued instructions and its
    Counts summed along it, so every pipe is counted on the path that issues the most."""
    if loop is None:
        members = set(cfg.reachable)
        children = cfg.loops
        head = 0
    else:
        members = set(loop.blocks)
        children = loop.children
        head = loop.header
    node_of = {b: ("b", b) for b in members}
    for c in children:
        for b in c.blocks:
            node_of[b] = ("l", c.header)
    child_by_header = {c.header: c for c in children}
    succ = {}
    for b in members:
        n = node_of[b]
        succ.setdefault(n, set())
        for s in cfg.blocks[b].successors:
            if s not in members or (loop is not None and s == head):
                continue  # leaves the loop or closes the iteration: a path may end here
            m = node_of[s]
            if m != n:
                succ[n].add(m)

    def node_weight(n):
        return loop_cost(child_by_header[n[1]]) if n[0] == "l" else weight(n[1])

    order, state = [], {}

    def visit(n):  # iterative depth-first search for a topological order
        stack = [(n, iter(sorted(succ[n])))]
        state[n] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                order.append(node)
                stack.pop()
            elif state.get(nxt) == 1:
                raise ValueError(
                    f"cycle through {cfg.address(nxt[1]):#x} within one iteration (irreducible control flow)"
                )
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(succ[nxt]))))

    start = node_of[head]
    visit(start)
    best = {}
    for n in order:  # reverse topological order: successors first
        best[n] = node_weight(n) + max((best[m] for m in succ[n]), default=0.0, key=primary)
    return best[start]


# ---- the pipes ------------------------------------------------------------------------------

# What one warp-instruction costs each pipe of an sm_90 SM (H100 and H200 have the same SM), in
# SM-clocks: 32 lanes over the pipe's results per clock per SM. The rates are the CUDA C++
# Programming Guide's ("Arithmetic Instructions", table "Throughput of Native Arithmetic
# Instructions", results per clock cycle per multiprocessor, compute capability 9.0 column), which
# the H100 whitepaper's SM (NVIDIA H100 Tensor Core GPU Architecture: per SM 128 FP32, 64 INT32 and
# 64 FP64 lanes in 4 sub-partitions of one scheduler each) agrees with:
#
# * issue: 4 schedulers, one warp-instruction each per clock: 1/4 clock. Every instruction.
# * fma: 32-bit float add, multiply, multiply-add 128 per clock (1/4); 32-bit integer multiply and
#   multiply-add 64 (1/2): IMAD in all its forms (IMAD.MOV, IMAD.SHL, IMAD.IADD are the compiler's
#   moves and adds on this pipe). Both are counted on one pipe.
# * alu: 32-bit integer add, shift, bitwise, compare, minimum and maximum 64 per clock (1/2): IADD3,
#   LOP3, SHF, LEA, ISETP, SEL and the like, and the float compares, selects and min/max (FSETP,
#   FSEL, FMNMX), which the Nsight Compute documentation puts on the same ALU pipe.
# * fp64: 64-bit float add, multiply, multiply-add 64 per clock (1/2): DFMA, DADD, DMUL, DSETP,
#   DMNMX. Half the float32 rate: an H100/H200 SXM's 67 TFLOPS float32 against 34 float64.
# * xu (special functions and conversions): reciprocal, square root, log2, exp2, sine, cosine
#   (MUFU) and type conversions 16 per clock (2 clocks: 8 clocks of one sub-partition's 4 lanes,
#   the four sub-partitions in parallel): MUFU, F2F, F2I, I2F, FRND, POPC, FLO, BREV.
# * shared: the shared-memory data path delivers 128 bytes per clock per SM (32 banks of 4 bytes).
#   A warp's access without bank conflicts takes one wavefront per 128 bytes it moves: 32-bit (and
#   narrower) LDS/STS/ATOMS 1, .64 2, .128 4; LDSM (ldmatrix) .x1/.x2/.x4 1/2/4. One clock each.
#   Bank conflicts add wavefronts: none are assumed, so this is a lower bound.
# * l1: the same data path with the global, local and generic loads and stores added (LDG, STG,
#   LD, ST, LDL, STL, LDGSTS, ATOM, RED), by the same width rule: coalesced 4-byte lanes fill one
#   128-byte wavefront.
#
# Instructions on no listed pipe (MOV, S2R, BRA, BAR, the uniform datapath's U* instructions, ...)
# cost issue slots only. The classification is a lower bound per pipe: an instruction it misses
# would only add to a pipe, never take away.
PIPES = ("issue", "fma", "alu", "fp64", "xu", "shared", "l1")
_FP32 = {"FFMA", "FADD", "FMUL", "FFMA32I", "FADD32I", "FMUL32I", "HFMA2", "HADD2", "HMUL2", "FSWZADD"}
_IMAD = {"IMAD", "IMUL", "IMAD32I", "IMUL32I"}
_ALU = {
    "IADD3", "IADD", "IADD32I", "LOP3", "LOP", "LOP32I", "SHF", "SHL", "SHR", "LEA", "ISETP", "FSETP",
    "SEL", "FSEL", "FMNMX", "IMNMX", "VIMNMX", "IABS", "BMSK", "SGXT", "PLOP3", "P2R", "R2P", "PRMT",
    "CSET", "CSETP", "FSET", "ISET", "ICMP", "FCMP",
}  # fmt: skip
_FP64 = {"DFMA", "DADD", "DMUL", "DSETP", "DMNMX", "DSET"}
_XU = {"MUFU", "F2F", "F2I", "I2F", "FRND", "POPC", "FLO", "BREV", "I2I"}
_SHARED = {"LDS", "STS", "LDSM", "ATOMS"}
_GLOBAL = {"LDG", "STG", "LD", "ST", "LDL", "STL", "LDGSTS", "ATOM", "ATOMG", "RED"}
CLOCKS = {"issue": 0.25, "fp32": 0.25, "imad": 0.5, "alu": 0.5, "fp64": 0.5, "xu": 2.0, "wavefront": 1.0}


class Counts(dict):
    """Per-pipe costs (SM-clocks, PIPES) of some code, with "instructions" (issued warp-instructions)
    and raw counts ("lds", "sts": shared loads and stores; "wavefronts"; "dp": float64 arithmetic;
    "mufu"). Adds and scales as a vector; missing keys are zero."""

    def __add__(self, other):
        out = Counts(self)
        if isinstance(other, dict):
            for k, v in other.items():
                out[k] = out.get(k, 0.0) + v
        elif other:
            raise TypeError("Counts add only to Counts or zero")
        return out

    __radd__ = __add__

    def __mul__(self, factor):
        return Counts({k: v * factor for k, v in self.items()})

    __rmul__ = __mul__

    def __missing__(self, key):
        return 0.0


def wavefronts(x: Instruction) -> int:
    """128-byte wavefronts of one warp's shared or global access without bank conflicts (the width
    rule above); 0 for an instruction that is no such access."""
    if x.base not in _SHARED and x.base not in _GLOBAL:
        return 0
    mods = x.opcode.split(".")[1:]
    if x.base == "LDSM":
        return 4 if "4" in mods else 2 if "2" in mods else 1
    return 4 if "128" in mods else 2 if "64" in mods else 1


def pipe_counts(x: Instruction) -> Counts:
    """What one instruction costs each pipe (SM-clocks per warp-instruction) and the raw counts."""
    c = Counts(instructions=1.0, issue=CLOCKS["issue"])
    b = x.base
    if b in _FP32:
        c["fma"] = CLOCKS["fp32"]
    elif b in _IMAD:
        c["fma"] = CLOCKS["imad"]
    elif b in _ALU:
        c["alu"] = CLOCKS["alu"]
    elif b in _FP64:
        c["fp64"] = CLOCKS["fp64"]
        c["dp"] = 1.0
    elif b in _XU:
        c["xu"] = CLOCKS["xu"]
        if b == "MUFU":
            c["mufu"] = 1.0
    w = wavefronts(x)
    if w:
        c["l1"] = w * CLOCKS["wavefront"]
        if b in _SHARED:
            c["shared"] = w * CLOCKS["wavefront"]
            c["wavefronts"] = float(w)
            if b in ("LDS", "LDSM"):
                c["lds"] = 1.0
            elif b == "STS":
                c["sts"] = 1.0
    return c


def block_counts(instructions: Iterable[Instruction]) -> Counts:
    total = Counts()
    for x in instructions:
        total = total + pipe_counts(x)
    return total


def waves(blocks: int, sms: int, blocks_per_sm: int) -> tuple:
    """(waves, whole waves): a launch's blocks over the resident-block slots of all SMs, and that
    rounded up."""
    slots = sms * blocks_per_sm
    return blocks / slots, -(-blocks // slots)


def launch_clocks(blocks: int, sms: int, blocks_per_sm: int, block_clocks: float, whole_waves: bool = False) -> float:
    """SM-clocks of a launch of `blocks` equal blocks, each costing its SM block_clocks (its busiest
    pipe's clocks; co-resident blocks share the pipe, so a full wave of blocks_per_sm blocks costs
    blocks_per_sm x block_clocks). The launch lasts as long as its busiest SM: the block scheduler
    hands every SM floor or ceil(blocks / sms) blocks, so ceil(blocks / sms) x block_clocks, the
    partial last wave costing only the blocks its busiest SM runs (e.g. 4080 blocks, 3 per SM, 132
    SMs: 10.3 waves, 31 block-times). whole_waves: every wave, the partial last one too, costs a
    full one (11 waves, 33 block-times): right when a block's time is set by latency, which its
    co-resident blocks do not slow, rather than by a pipe they share."""
    if whole_waves:
        return waves(blocks, sms, blocks_per_sm)[1] * blocks_per_sm * block_clocks
    return -(-blocks // sms) * block_clocks


# ---- occupancy ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SmLimits:
    """One SM's limits as NVIDIA's occupancy rules state them (the CUDA toolkit's
    cuda_occupancy.h, compute capability 9.0: H100 and H200 alike)."""

    name: str = "sm_90 (H100/H200)"
    max_threads: int = 2048
    max_warps: int = 64
    max_blocks: int = 32
    registers: int = 65536
    registers_per_block: int = 65536
    max_registers_per_thread: int = 255
    register_unit: int = 256  # registers are allocated per warp in units of 256
    sub_partitions: int = 4  # each holds a quarter of the register file
    smem_per_sm: int = 228 * 1024  # the largest carve-out
    smem_per_block_optin: int = 227 * 1024
    smem_unit: int = 128
    smem_reserved_per_block: int = 1024  # the driver's share of each block's shared memory
    barriers_per_block_slot: int = 2  # named barriers available: 2 per resident-block slot


H200 = SmLimits()


@functools.cache
def cuda_arches():
    """flip_loss/cuda_arches.py loaded on its own (the package's import would load torch)."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "flip_loss", "cuda_arches.py")
    spec = importlib.util.spec_from_file_location("flip_loss_cuda_arches", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shared_memory_per_block():
    """flip_loss/cuda_arches.py's shared memory per block by compute capability."""
    return cuda_arches().SHARED_MEMORY_PER_BLOCK


def _generation(capability, name, threads, blocks, smem_per_sm, barriers):
    """An SM of another compute capability: the CUDA programming guide's resident threads and shared
    memory per SM, cuda_occupancy.h's resident blocks, barriers per block slot and allocation units
    (256 B of shared memory before Ampere, no reserved share there), flip_loss/cuda_arches.py's shared
    memory per block."""
    major = int(capability.split(".")[0])
    return SmLimits(
        name=name,
        max_threads=threads,
        max_warps=threads // 32,
        max_blocks=blocks,
        smem_per_sm=smem_per_sm,
        smem_per_block_optin=_shared_memory_per_block()[capability],
        smem_unit=128 if major >= 8 else 256,
        smem_reserved_per_block=1024 if major >= 8 else 0,
        barriers_per_block_slot=barriers,
    )


# The SM of each generation the build has SASS for, and of the GPUs that run another's (sm_89 runs
# sm_86's code, sm_103 sm_100's, sm_121 sm_120's): what the occupancy of the same kernels is there.
GENERATIONS = {
    "7.5": _generation("7.5", "sm_75 (T4, RTX 20)", 1024, 16, 64 * 1024, 2),
    "8.0": _generation("8.0", "sm_80 (A100)", 2048, 32, 164 * 1024, 2),
    "8.6": _generation("8.6", "sm_86 (RTX 30)", 1536, 16, 100 * 1024, 1),
    "8.9": _generation("8.9", "sm_89 (RTX 40, L4, L40; sm_86 code)", 1536, 24, 100 * 1024, 1),
    "9.0": H200,
    "10.0": _generation("10.0", "sm_100 (B200)", 2048, 32, 228 * 1024, 2),
    "12.0": _generation("12.0", "sm_120 (RTX 50, RTX PRO)", 1536, 24, 100 * 1024, 1),
}


def _round_up(x, unit):
    return -(-x // unit) * unit


def occupancy(threads: int, registers: int, smem_bytes: int, limits: SmLimits = H200, barriers: int = 1) -> dict:
    """Resident blocks per SM and the fraction of the SM's warp slots they fill, with the limits that
    bind (all of them on a tie). smem_bytes: static plus dynamic shared memory of one block (the
    driver's reserved 1 KB is added here)."""
    warps = -(-threads // 32)
    by_warps = limits.max_warps // warps
    regs_per_warp = _round_up(max(registers, 1) * 32, limits.register_unit)
    warps_by_regs = (limits.registers // limits.sub_partitions // regs_per_warp) * limits.sub_partitions
    fits_regs = (
        registers <= limits.max_registers_per_thread
        and regs_per_warp * _round_up(warps, limits.sub_partitions) <= limits.registers_per_block
    )
    by_regs = warps_by_regs // warps if fits_regs else 0
    smem = _round_up(smem_bytes + limits.smem_reserved_per_block, limits.smem_unit)
    fits_smem = smem <= limits.smem_per_block_optin + limits.smem_reserved_per_block
    # No shared memory at all (before Ampere no share is reserved): no limit from it.
    by_smem = (limits.smem_per_sm // smem if smem else limits.max_blocks) if fits_smem else 0
    by_barriers = (limits.max_blocks * limits.barriers_per_block_slot) // barriers if barriers else limits.max_blocks
    limits_by = {
        "warps": by_warps,
        "blocks": limits.max_blocks,
        "registers": by_regs,
        "shared memory": by_smem,
        "barriers": by_barriers,
    }
    blocks = min(limits_by.values())
    binding = ", ".join(k for k, v in limits_by.items() if v == blocks)
    return {
        "blocks_per_sm": blocks,
        "warps_per_sm": blocks * warps,
        "occupancy": blocks * warps / limits.max_warps,
        "limited_by": binding,
        "smem_per_block_allocated": smem,
        "limits": limits_by,
    }


def issue_rate(sms: int, schedulers: int, clock_hz: float) -> float:
    """Warp-instructions the GPU can issue per second: one per scheduler per clock."""
    return sms * schedulers * clock_hz


def warp_iterations(total: int, tid_stride: int, threads: int, first: int = 0) -> float:
    """Average number of iterations per warp of ``for (i = tid + first; i < total; i += tid_stride)``
    over the warps of a block of `threads` threads: a warp iterates while any of its lanes does."""
    warps = -(-threads // 32)
    runs = [max(0, math.ceil((total - first - 32 * w) / tid_stride)) for w in range(warps)]
    return sum(runs) / warps
