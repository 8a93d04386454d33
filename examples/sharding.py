"""Sharded data parallelism for examples/train.py: ZeRO stage 2 and 3 (FSDP's SHARD_GRAD_OP and
FULL_SHARD), over all data-parallel ranks or hybrid (HYBRID_SHARD: shards within a group of
ranks, replicas across groups), written with the collectives every PyTorch build has.

Why not torch.distributed.fsdp: on Debian 12 (torch 1.13 with Python 3.11) it cannot even be
imported, and its gloo backend has no reduce_scatter nor all_gather_into_tensor. This module
needs only all_gather (list form) and all_reduce, which gloo and NCCL both run.

How it works, unit by unit (one unit per decoder block, plus the root unit holding everything
else: embeddings, the final norm and the LM head, tied or not):
* A unit's parameters are flattened into one vector, padded to a multiple of the shard group's
  size S; each rank keeps one 1/S slice of it as its `shard` (an fp32 nn.Parameter): what the
  optimizer steps, with its gradient and AdamW moments also 1/S.
* Before a unit's forward, its shards are all-gathered into the full vector and the modules'
  weights become views of it. ZeRO-3 frees the full vector's storage after the unit's forward
  and gathers it again just before the unit's backward (a hook on the unit's output gradient);
  ZeRO-2 keeps it until the backward is done. The root unit is gathered for the whole step.
* The full vector comes out of an autograd Function whose backward receives the unit's whole
  gradient once the unit's backward is over: it is all-reduced over the shard group (gloo has
  no reduce-scatter), this rank's slice kept, summed over the replicas (hybrid), divided by the
  data-parallel size (DDP's mean) and accumulated into `shard.grad`; the full gradient and (both
  stages) the full weights are freed there.
* Checkpoints are written in the layout of an unsharded run (the model's state_dict and
  torch.optim.AdamW's state_dict), so a run resumes from any other's checkpoint: DDP, ZeRO-1,
  ZeRO-3 or another world size.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.nn as nn


@dataclasses.dataclass(frozen=True)
class Mesh:
    """This rank's place: `shard` ranks hold one copy of the state between them; `replicas`
    copies exist (hybrid sharding when > 1). Ranks of one shard group are consecutive (those of
    one node, as launchers number them)."""
    rank: int
    world: int
    shard: int

    @property
    def replicas(self) -> int:
        return self.world // self.shard

    @property
    def shard_rank(self) -> int:
        return self.rank % self.shard


class Groups:
    """The process groups of a Mesh. dist.new_group must be called by every rank for every
    group, in the same order, so all are made and this rank's two kept."""

    def __init__(self, mesh: Mesh):
        self.shard: Optional[Any] = None      # None: the default (world) group
        self.replica: Optional[Any] = None    # None: no replicas
        if mesh.replicas == 1:
            return
        for g in range(mesh.replicas):
            group = dist.new_group(list(range(g * mesh.shard, (g + 1) * mesh.shard)))
            if mesh.rank // mesh.shard == g:
                self.shard = group
        for i in range(mesh.shard):
            group = dist.new_group(list(range(i, mesh.world, mesh.shard)))
            if mesh.shard_rank == i:
                self.replica = group


@dataclasses.dataclass
class _Slot:
    """One parameter inside a unit's flat vector, and where the modules hold it."""
    key: str                                  # its name in the model's state_dict (the first)
    owners: list[tuple[nn.Module, str]]       # (module, attribute): two when tied
    keys: list[str]                           # each owner's name in the state_dict
    offset: int
    shape: torch.Size

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class _Gather(torch.autograd.Function):
    """shard -> the unit's full flat vector; backward: full gradient -> this rank's shard of
    the mean gradient (see the module docstring)."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, unit: "Unit") -> torch.Tensor:  # noqa: D102
        ctx.unit = unit
        return unit.gather()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # noqa: D102
        return ctx.unit.reduce(grad), None


class Unit:
    def __init__(self, name: str, slots: list[_Slot], params: list[torch.Tensor],
                 mesh: Mesh, groups: Groups, device: torch.device):
        self.name, self.slots, self.mesh, self.groups = name, slots, mesh, groups
        total = sum(s.numel for s in slots)
        self.padded = math.ceil(max(total, 1) / mesh.shard) * mesh.shard
        self.shard_numel = self.padded // mesh.shard
        full = torch.zeros(self.padded, dtype=torch.float32, device=device)
        decay = torch.zeros(self.padded, dtype=torch.bool, device=device)
        for slot, p in zip(slots, params):
            full[slot.offset:slot.offset + slot.numel].copy_(p.detach().reshape(-1))
            decay[slot.offset:slot.offset + slot.numel] = p.dim() >= 2
        lo = mesh.shard_rank * self.shard_numel
        self.shard = nn.Parameter(full[lo:lo + self.shard_numel].clone())
        self.decay_mask = decay[lo:lo + self.shard_numel].clone()
        self.full: Optional[torch.Tensor] = None  # the gathered vector while the unit is in use
        self.freed = False

    # -- collectives ---------------------------------------------------------------------------
    def _all_gather(self, out: torch.Tensor, shard: torch.Tensor) -> None:
        if self.mesh.shard == 1:
            out.copy_(shard)
        else:
            dist.all_gather(list(out.chunk(self.mesh.shard)), shard, group=self.groups.shard)

    def gather(self) -> torch.Tensor:
        full = torch.empty(self.padded, dtype=self.shard.dtype, device=self.shard.device)
        self._all_gather(full, self.shard.detach())
        return full

    def regather(self) -> None:
        """Fills the freed vector again (the views saved for backward read it): written through
        .data, so autograd's version counters do not see it."""
        if self.full is None or not self.freed:
            return
        self.full.storage().resize_(self.padded)
        self._all_gather(self.full.data, self.shard.detach())
        self.freed = False

    def free(self) -> None:
        if self.full is not None and not self.freed:
            self.full.storage().resize_(0)
            self.freed = True

    def reduce(self, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        if self.mesh.shard > 1:
            dist.all_reduce(grad, group=self.groups.shard)
        lo = self.mesh.shard_rank * self.shard_numel
        mine = grad[lo:lo + self.shard_numel].clone()
        del grad
        if self.mesh.replicas > 1:
            dist.all_reduce(mine, group=self.groups.replica)
        mine /= self.mesh.world
        self.free()
        self.full = None
        return mine

    # -- the modules' view ---------------------------------------------------------------------
    def enter(self) -> None:
        """Gathers the unit and points its modules' weights at the full vector."""
        self.full = _Gather.apply(self.shard, self)
        self.freed = False
        for slot in self.slots:
            view = self.full[slot.offset:slot.offset + slot.numel].view(slot.shape)
            for module, attr in slot.owners:
                setattr(module, attr, view)

    def full_copy(self) -> torch.Tensor:
        """The whole flat vector (collective), outside autograd: for checkpoints."""
        with torch.no_grad():
            return self.gather()

    def full_of(self, shard_tensor: torch.Tensor) -> torch.Tensor:
        """A per-shard tensor (an AdamW moment) gathered whole (collective)."""
        out = torch.empty(self.padded, dtype=shard_tensor.dtype, device=shard_tensor.device)
        self._all_gather(out, shard_tensor)
        return out

    def my_slice(self, full: torch.Tensor) -> torch.Tensor:
        lo = self.mesh.shard_rank * self.shard_numel
        return full[lo:lo + self.shard_numel].clone()


class ShardAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's update (decoupled weight decay, bias-corrected moments, no amsgrad)
    on flat shards, with weight decay on the elements of matrices only (as the unsharded run's
    two parameter groups have it)."""

    def __init__(self, units: list[Unit], lr: float, betas: tuple[float, float],
                 weight_decay: float, eps: float = 1e-8):
        super().__init__([u.shard for u in units],
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.masks = {id(u.shard): u.decay_mask for u in units}
        self.step_count = 0

    @torch.no_grad()
    def step(self, closure: Optional[Callable] = None):  # noqa: D102
        self.step_count += 1
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            bias1 = 1 - beta1 ** self.step_count
            bias2_sqrt = math.sqrt(1 - beta2 ** self.step_count)
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                decay = self.masks[id(p)]
                p.sub_(p * decay * (lr * group["weight_decay"]))
                state["exp_avg"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denom = (state["exp_avg_sq"].sqrt() / bias2_sqrt).add_(eps)
                p.addcdiv_(state["exp_avg"], denom, value=-lr / bias1)
        return None


class ShardedScaler:
    """Dynamic loss scaling for fp16 over sharded gradients: the overflow check is all-reduced
    over every rank (each holds other elements), so all ranks skip or take the same steps.
    Its state_dict has torch.cuda.amp.GradScaler's keys, so checkpoints stay interchangeable."""

    def __init__(self, enabled: bool, init_scale: float = 2.0 ** 16, growth_interval: int = 2000):
        self.enabled = enabled
        self.scale_value = init_scale
        self.growth_interval = growth_interval
        self.growth_tracker = 0

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_value if self.enabled else loss

    def unscale_and_check(self, optimizer: ShardAdamW, distributed: bool) -> bool:
        """Divides the shard gradients by the scale; True when some rank saw inf or NaN."""
        if not self.enabled:
            return False
        found = torch.zeros(1, device=optimizer.param_groups[0]["params"][0].device)
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.div_(self.scale_value)
                    found = torch.maximum(found, (~torch.isfinite(p.grad)).any().float()[None])
        if distributed:
            dist.all_reduce(found, op=dist.ReduceOp.MAX)
        return bool(found.item())

    def update(self, overflow: bool) -> None:
        if not self.enabled:
            return
        if overflow:
            self.scale_value /= 2
            self.growth_tracker = 0
            return
        self.growth_tracker += 1
        if self.growth_tracker >= self.growth_interval:
            self.scale_value *= 2
            self.growth_tracker = 0

    def state_dict(self) -> dict[str, Any]:
        if not self.enabled:
            return {}
        return {"scale": self.scale_value, "growth_factor": 2.0, "backoff_factor": 0.5,
                "growth_interval": self.growth_interval, "_growth_tracker": self.growth_tracker}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.scale_value = float(state["scale"])
            self.growth_tracker = int(state.get("_growth_tracker", 0))


class ShardedModel:
    """The Decoder of train.py with its parameters sharded (see the module docstring). Call
    the model as usual; `begin_step`/`end_step` are not needed: each forward gathers what it
    uses and each backward frees it."""

    def __init__(self, model: nn.Module, zero: int, mesh: Mesh, device: torch.device):
        self.model, self.zero, self.mesh = model, zero, mesh
        self.reshard_after_forward = zero >= 3
        self.groups = Groups(mesh)
        # The unsharded optimizer's parameter order and groups (decay first), for checkpoints.
        names = {id(p): n for n, p in model.named_parameters()}
        params = list(model.parameters())  # tied weights once
        self.opt_order = ([names[id(p)] for p in params if p.dim() >= 2] +
                          [names[id(p)] for p in params if p.dim() < 2])
        self.state_keys = list(model.state_dict())  # the unsharded state_dict's names, in order
        self.units = [self._make_unit(f"blocks.{i}", block, f"blocks.{i}.")
                      for i, block in enumerate(model.blocks)]
        self.root = self._make_unit("root", model, "")
        self.units.append(self.root)
        model.sharding = self

    def _make_unit(self, name: str, module: nn.Module, prefix: str) -> Unit:
        """A unit of every parameter under `module` not yet in a unit; removes them from the
        modules (they become plain attributes, pointed at the full vector by Unit.enter)."""
        by_param: dict[int, _Slot] = {}
        params: list[torch.Tensor] = []
        slots: list[_Slot] = []
        offset = 0
        for mod_name, mod in module.named_modules(remove_duplicate=False):
            for attr, p in list(mod._parameters.items()):
                if p is None:
                    continue
                key = f"{prefix}{mod_name + '.' if mod_name else ''}{attr}"
                if id(p) in by_param:
                    by_param[id(p)].owners.append((mod, attr))
                    by_param[id(p)].keys.append(key)
                else:
                    slot = _Slot(key=key, owners=[(mod, attr)], keys=[key], offset=offset,
                                 shape=p.shape)
                    by_param[id(p)] = slot
                    slots.append(slot)
                    params.append(p)
                    offset += slot.numel
        unit = Unit(name, slots, params, self.mesh, self.groups, params[0].device
                    if params else torch.device("cpu"))
        for slot in slots:
            for mod, attr in slot.owners:
                del mod._parameters[attr]
                setattr(mod, attr, torch.empty(0))
        return unit

    # -- called by Decoder.forward -------------------------------------------------------------
    def before_root(self) -> None:
        self.root.enter()

    def before_block(self, i: int) -> None:
        self.units[i].enter()

    def after_block(self, i: int, x: torch.Tensor) -> torch.Tensor:
        unit = self.units[i]
        if self.reshard_after_forward and torch.is_grad_enabled():
            unit.free()
            if x.requires_grad:
                x.register_hook(lambda grad, u=unit: (u.regather(), grad)[1])
        return x

    # -- state ---------------------------------------------------------------------------------
    def shard_params(self) -> list[nn.Parameter]:
        return [u.shard for u in self.units]

    def clip_grad_norm(self, max_norm: float) -> None:
        """Scales the shard gradients so that the whole gradient's norm is at most max_norm."""
        sq = torch.zeros(1, dtype=torch.float64, device=self.root.shard.device)
        for u in self.units:
            if u.shard.grad is not None:
                sq += u.shard.grad.double().pow(2).sum()
        if self.mesh.shard > 1:
            dist.all_reduce(sq, group=self.groups.shard)
        total = math.sqrt(sq.item())
        coef = max_norm / (total + 1e-6)
        if coef < 1:
            for u in self.units:
                if u.shard.grad is not None:
                    u.shard.grad.mul_(coef)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The unsharded model's state_dict (collective; every rank gets it)."""
        out: dict[str, torch.Tensor] = {}
        for u in self.units:
            full = u.full_copy()
            for slot in u.slots:
                value = full[slot.offset:slot.offset + slot.numel].view(slot.shape).clone()
                for key in slot.keys:
                    out[key] = value
        return {k: out[k] for k in self.state_keys}

    def optimizer_state_dict(self, optimizer: ShardAdamW,
                             reference: dict[str, Any]) -> dict[str, Any]:
        """torch.optim.AdamW's state_dict of the unsharded run (collective). `reference` is
        that optimizer's empty state_dict: its param_groups are copied with the current lr."""
        moments: dict[str, dict[str, torch.Tensor]] = {}
        for u in self.units:
            state = optimizer.state.get(u.shard, {})
            if not state:
                continue
            whole = {k: u.full_of(state[k]) for k in ("exp_avg", "exp_avg_sq")}
            for slot in u.slots:
                moments[slot.key] = {k: v[slot.offset:slot.offset + slot.numel]
                                     .view(slot.shape).clone() for k, v in whole.items()}
        state_out = {}
        for index, name in enumerate(self.opt_order):
            if name in moments:
                state_out[index] = {"step": torch.tensor(float(optimizer.step_count)),
                                    **moments[name]}
        groups = [dict(g, lr=optimizer.param_groups[0]["lr"]) for g in reference["param_groups"]]
        return {"state": state_out, "param_groups": groups}

    def load_optimizer_state(self, optimizer: ShardAdamW, saved: dict[str, Any]) -> None:
        """Takes this rank's slices of an unsharded AdamW state_dict (any run's)."""
        by_name = {self.opt_order[int(i)]: s for i, s in saved["state"].items()}
        steps = {int(float(s["step"])) for s in by_name.values()}
        optimizer.step_count = max(steps) if steps else 0
        for u in self.units:
            if not any(slot.key in by_name for slot in u.slots):
                continue
            whole = {k: torch.zeros(u.padded, device=u.shard.device)
                     for k in ("exp_avg", "exp_avg_sq")}
            for slot in u.slots:
                s = by_name.get(slot.key)
                if s is None:
                    continue
                for k in whole:
                    whole[k][slot.offset:slot.offset + slot.numel] = s[k].reshape(-1)
            optimizer.state[u.shard] = {k: u.my_slice(v) for k, v in whole.items()}
