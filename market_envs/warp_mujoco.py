"""Ant-v5 and Humanoid-v5 stepped on the device by MuJoCo Warp, behind the batched env contract.

`WarpMujocoEnv` simulates its N robots as the N worlds of one `mujoco_warp` data batch
(``put_model``, ``put_data(nworld=N)``, ``step``) and speaks `GymVecEnv`'s contract
(docs/contracts.md): torch tensors in and out on `device`, actions in [-1, 1] clipped and
rescaled to the actuators' ``ctrlrange``, ``terminated`` and ``truncated`` apart (truncated
at 1,000 steps, as gymnasium's ``TimeLimit``), same-step autoreset with the last
observation in ``info["final_obs"]``. State, observations, rewards and flags stay on the
device: the tensors are views of warp's arrays (``wp.to_torch``), and no step copies to
the host. On CUDA the frame-skip loop and the reset's ``forward`` are each captured once
in a CUDA graph (where capture fails, they are launched kernel by kernel); on the CPU
warp's CPU device runs them, slowly (a few hundred kernel launches a step), for the tests.

The rules are gymnasium's ant_v5.py and humanoid_v5.py with their default arguments, on
the xml files gymnasium ships:

- a step applies the action as ``ctrl`` for ``frame_skip`` = 5 MuJoCo steps, then runs
  ``rne_postconstraint`` (which fills ``cfrc_ext``), as gymnasium's ``do_simulation``;
- observation: Ant ``qpos[2:], qvel, clip(cfrc_ext[1:], -1, 1)`` (105 numbers); Humanoid
  ``qpos[2:], qvel, cinert[1:], cvel[1:], qfrc_actuator[6:], cfrc_ext[1:]`` (348);
- reward: forward velocity (Ant: body 1's x, weight 1; Humanoid: the mass centre's x,
  weight 1.25) + healthy reward (1; 5) - ctrl cost (0.5; 0.1 times the sum of squared
  controls) - contact cost (Ant: 5e-4 times the sum of squared clipped ``cfrc_ext``;
  Humanoid: 5e-7 times the sum of squared ``cfrc_ext``, at most 10);
- healthy: Ant ``0.2 <= z <= 1`` and every qpos and qvel finite; Humanoid ``1 < z < 2``;
  unhealthy terminates;
- reset: ``qpos0`` plus uniform noise in ±0.1 (Ant) or ±0.01 (Humanoid), zero velocity plus
  0.1 x standard normal noise (Ant) or uniform ±0.01 (Humanoid); controls, warm start and
  ``cfrc_ext`` are zero, as after gymnasium's ``mj_resetData`` and ``mj_forward``.

What differs, and what it costs:

- warp computes in float32, MuJoCo C in float64: from the same state, one step agrees
  within the tolerance that tests/test_warp_mujoco.py states and measures;
- Humanoid's xml asks for the PGS solver, which MuJoCo Warp lacks: its model here uses
  Newton (same iterations); the test compares against MuJoCo C set to Newton too, and
  measures the gap to stock PGS;
- Ant: for some capsule-floor contacts MuJoCo Warp 4.0.0 orients the contact frame (the
  edges of the pyramidal friction cone) otherwise than MuJoCo C, and a step with such a
  contact differs by more than rounding (tests/test_warp_mujoco.py measures it);
- reset noise comes from one torch generator seeded with ``seed`` on the device: the same
  distributions as gymnasium, not the same draws; a run is a pure function of the seed;
- a finished row is reset with masks: one ``forward`` over every world per step, which
  recomputes the reset rows' kinematics (and leaves the others' state untouched: the next
  step starts from ``qpos``, ``qvel`` and the warm start as MuJoCo does);
- contacts and constraint rows have fixed room per world (``nconmax``, ``njmax``).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import gymnasium
import mujoco
import numpy as np
import torch
from torch import Tensor

from market_envs.devices import resolve_device
from market_envs.errors import ConfigError, UserError
from market_envs.gym_vec import check_step

try:
    import mujoco_warp as mjw
    import warp as wp
except ImportError:  # an optional extra: `make gpu`
    mjw = wp = None

NOT_INSTALLED = "MuJoCo Warp is not installed: run `make gpu`"
MAX_EPISODE_STEPS = 1000
"""Gymnasium's registered ``max_episode_steps`` of Ant-v5 and Humanoid-v5."""


@dataclass(frozen=True)
class Locomotion:
    """One gymnasium locomotion env's definition (its default arguments)."""

    xml: str
    """File name in gymnasium/envs/mujoco/assets/."""
    observation: tuple[tuple[str, int], ...]
    """The data fields the observation concatenates, each from its first row kept."""
    forward_reward_weight: float
    ctrl_cost_weight: float
    contact_cost_weight: float
    healthy_reward: float
    healthy_z_range: tuple[float, float]
    healthy_inclusive: bool
    """Ant: ``low <= z <= high`` and a finite state; Humanoid: ``low < z < high``."""
    velocity_of_mass_centre: bool
    """Forward velocity of the mass centre (Humanoid) or of body 1 (Ant)."""
    contact_force_range: tuple[float, float] | None
    """Ant clips ``cfrc_ext`` to this range, in the observation and the contact cost."""
    contact_cost_max: float
    """Humanoid clips the contact cost to at most this."""
    reset_noise_scale: float
    qvel_noise_normal: bool
    """Ant's velocity noise is scale x standard normal; Humanoid's is uniform like qpos's."""
    newton_solver: bool = False
    """Humanoid's xml asks for PGS, which MuJoCo Warp lacks: use Newton."""
    frame_skip: int = 5


LOCOMOTION = {
    "Ant-v5": Locomotion(
        xml="ant.xml",
        observation=(("qpos", 2), ("qvel", 0), ("cfrc_ext", 1)),
        forward_reward_weight=1.0,
        ctrl_cost_weight=0.5,
        contact_cost_weight=5e-4,
        healthy_reward=1.0,
        healthy_z_range=(0.2, 1.0),
        healthy_inclusive=True,
        velocity_of_mass_centre=False,
        contact_force_range=(-1.0, 1.0),
        contact_cost_max=float("inf"),
        reset_noise_scale=0.1,
        qvel_noise_normal=True,
    ),
    "Humanoid-v5": Locomotion(
        xml="humanoid.xml",
        observation=(
            ("qpos", 2),
            ("qvel", 0),
            ("cinert", 1),
            ("cvel", 1),
            ("qfrc_actuator", 6),
            ("cfrc_ext", 1),
        ),
        forward_reward_weight=1.25,
        ctrl_cost_weight=0.1,
        contact_cost_weight=5e-7,
        healthy_reward=5.0,
        healthy_z_range=(1.0, 2.0),
        healthy_inclusive=False,
        velocity_of_mass_centre=True,
        contact_force_range=None,
        contact_cost_max=10.0,
        reset_noise_scale=1e-2,
        qvel_noise_normal=False,
        newton_solver=True,
    ),
}
NCONMAX = 64
"""Contacts per world (MuJoCo C saw at most 5 in 3,000 random steps of either robot)."""
NJMAX = 256
"""Constraint rows per world (at most 25 seen)."""


def load_model(env_id: str) -> mujoco.MjModel:
    """The MuJoCo model of ``env_id`` from the xml gymnasium ships, with the solver warp runs."""
    spec = LOCOMOTION[env_id]
    path = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / spec.xml
    model = mujoco.MjModel.from_xml_path(str(path))
    if spec.newton_solver:
        model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    return model


class WarpMujocoEnv:
    """N robots of Ant-v5 or Humanoid-v5 as one batch of MuJoCo Warp worlds on `device`.

    :param env_id: "Ant-v5" or "Humanoid-v5".
    :param num_envs: number of robots N (warp's worlds).
    :param device: "cuda" (or "cuda:K") or "cpu" (warp's CPU device: slow, for tests).
    :param seed: seeds the reset noise; ``reset(seed=...)`` seeds it again.
    :param max_episode_steps: truncation (gymnasium's registered 1,000).
    :param nconmax: contacts per world.
    :param njmax: constraint rows per world.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        max_episode_steps: int = MAX_EPISODE_STEPS,
        nconmax: int = NCONMAX,
        njmax: int = NJMAX,
    ) -> None:
        if mjw is None:
            raise UserError(NOT_INSTALLED)
        if env_id not in LOCOMOTION:
            raise ConfigError(f"WarpMujocoEnv: env_id must be one of {', '.join(LOCOMOTION)}, got {env_id!r}")
        if num_envs <= 0:
            raise ConfigError(f"WarpMujocoEnv: num_envs must be positive, got {num_envs}")
        self.env_id = env_id
        self.spec = LOCOMOTION[env_id]
        self.num_envs = int(num_envs)
        self.device = resolve_device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"WarpMujocoEnv: device {self.device} asked for, but CUDA is not available")
        self.seed = int(seed)
        self.max_episode_steps = int(max_episode_steps)
        self.generator = torch.Generator(self.device)
        self._set_up(load_model(env_id), nconmax, njmax)
        self._has_reset = False

    def _set_up(self, model: mujoco.MjModel, nconmax: int, njmax: int) -> None:
        """Model and data on the device, torch views of the fields used, spaces, graph."""
        wp.config.log_level = wp.LOG_WARNING  # no line per kernel module compiled or loaded
        wp.config.quiet = True
        wp.init()
        self._wp_device = wp.device_from_torch(self.device)
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.model = model
        self.dt = model.opt.timestep * self.spec.frame_skip
        with self._on_device():
            self._m = mjw.put_model(model)
            self._d = mjw.put_data(model, mujoco.MjData(model), self.num_envs, nconmax=nconmax, njmax=njmax)
        fields = {"qpos", "qvel", "ctrl", "time", "qacc_warmstart", "xpos", "xipos", "cfrc_ext"}
        fields |= {name for name, _ in self.spec.observation}
        self._views = {name: wp.to_torch(getattr(self._d, name)) for name in fields}
        self._qpos0 = self._tensor(model.qpos0)
        self._body_mass = self._tensor(model.body_mass)
        low, high = self._tensor(model.actuator_ctrlrange[:, 0]), self._tensor(model.actuator_ctrlrange[:, 1])
        self._act_low, self._act_half_range = low, (high - low) / 2
        self.act_dim = int(model.nu)
        self.single_action_space = gymnasium.spaces.Box(
            model.actuator_ctrlrange[:, 0].astype(np.float32), model.actuator_ctrlrange[:, 1].astype(np.float32)
        )
        self.obs_dim = int(self._observation().shape[1])
        self.single_observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (self.obs_dim,), np.float32)
        self._steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._xy = torch.zeros(self.num_envs, 2, device=self.device)
        self._graphs = self._capture() if self.device.type == "cuda" else {}

    def _tensor(self, values: np.ndarray) -> Tensor:
        return torch.as_tensor(np.asarray(values), dtype=torch.float32, device=self.device)

    def _on_device(self) -> contextlib.AbstractContextManager:
        """Warp's launches on this env's device (and, on CUDA, on this env's stream)."""
        if self._stream is None:
            return wp.ScopedDevice(self._wp_device)
        stack = contextlib.ExitStack()
        stack.enter_context(wp.ScopedDevice(self._wp_device))
        stack.enter_context(wp.ScopedStream(wp.stream_from_torch(self._stream)))
        stack.enter_context(torch.cuda.stream(self._stream))
        return stack

    def _simulate(self) -> None:
        """``frame_skip`` MuJoCo steps, then ``cfrc_ext`` (gymnasium's ``do_simulation``)."""
        for _ in range(self.spec.frame_skip):
            mjw.step(self._m, self._d)
        mjw.rne_postconstraint(self._m, self._d)

    def _forward(self) -> None:
        mjw.forward(self._m, self._d)

    def _capture(self) -> dict[str, Any]:
        """`_simulate` and `_forward` as CUDA graphs (each left out where capture fails)."""
        graphs = {}
        with self._on_device():
            for name, launch in (("simulate", self._simulate), ("forward", self._forward)):
                launch()  # loads every kernel module before capture
                try:
                    with wp.ScopedCapture() as capture:
                        launch()
                except Exception as err:  # noqa: BLE001 - a graph is an optimisation; launch kernel by kernel
                    warnings.warn(f"WarpMujocoEnv: no CUDA graph for {name} ({err}); launching its kernels one by one")
                    continue
                graphs[name] = capture.graph
        return graphs

    def _launch(self, name: str) -> None:
        """Run `_simulate` or `_forward`: its CUDA graph where there is one."""
        graph = self._graphs.get(name)
        if graph is not None:
            wp.capture_launch(graph)
        else:
            getattr(self, f"_{name}")()

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """Reset every robot; obs float32 [N, obs_dim] on `device`."""
        if seed is None and not self._has_reset:
            seed = self.seed
        if seed is not None:
            self.generator.manual_seed(int(seed))
        self._has_reset = True
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        with self._entered():
            obs = self._reset_rows(everyone, torch.zeros(self.num_envs, self.obs_dim, device=self.device))
        return obs, {}

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Tensor]]:
        """Step every robot with actions [N, act_dim] in [-1, 1] (clipped)."""
        check_step(self, actions)
        with self._entered():
            ctrl = (
                self._act_low + (actions.to(self.device, torch.float32).clamp(-1.0, 1.0) + 1.0) * self._act_half_range
            )
            self._views["ctrl"].copy_(ctrl)
            xy_before = self._xy
            self._launch("simulate")
            self._xy = self._position()
            final_obs = self._observation()
            healthy = self._healthy()
            reward = self._reward((self._xy - xy_before)[:, 0] / self.dt, healthy, ctrl)
            self._steps += 1
            terminated = ~healthy
            truncated = self._steps >= self.max_episode_steps
            obs = self._reset_rows(terminated | truncated, final_obs)
        return obs, reward, terminated, truncated, {"final_obs": final_obs}

    def set_state(self, qpos: Tensor, qvel: Tensor) -> Tensor:
        """Put every robot in state ``qpos`` [N, nq], ``qvel`` [N, nv] (zero controls and warm
        start; episode step counts unchanged), as gymnasium's ``set_state``; returns the obs."""
        if not self._has_reset:
            raise UserError("WarpMujocoEnv.set_state called before reset()")
        for name, value in (("qpos", qpos), ("qvel", qvel)):
            if tuple(value.shape) != tuple(self._views[name].shape):
                raise ConfigError(
                    f"WarpMujocoEnv.set_state: {name} must have shape {tuple(self._views[name].shape)}, "
                    f"got {tuple(value.shape)}"
                )
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        with self._entered():
            return self._write_state(everyone, qpos.to(self.device, torch.float32), qvel.to(self.device, torch.float32))

    def close(self) -> None:
        """Release the graphs and the device arrays."""
        self._graphs = {}
        self._views = {}
        self._m = self._d = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WarpMujocoEnv({self.env_id!r}, num_envs={self.num_envs}, device={self.device})"

    def _entered(self) -> contextlib.AbstractContextManager:
        """On CUDA: this env's stream waits for the caller's, and the caller's for it after."""
        if self._stream is None:
            return self._on_device()
        caller = torch.cuda.current_stream(self.device)
        stack = contextlib.ExitStack()
        self._stream.wait_stream(caller)
        stack.callback(caller.wait_stream, self._stream)
        stack.enter_context(self._on_device())
        return stack

    def _observation(self) -> Tensor:
        """The observation [N, obs_dim] read from the data now (see the module docstring)."""
        parts = []
        for name, first in self.spec.observation:
            part = self._views[name][:, first:].reshape(self.num_envs, -1)
            if name == "cfrc_ext" and self.spec.contact_force_range is not None:
                part = part.clamp(*self.spec.contact_force_range)
            parts.append(part)
        return torch.cat(parts, dim=1)

    def _position(self) -> Tensor:
        """x, y [N, 2] of body 1 (Ant) or of the mass centre (Humanoid)."""
        if not self.spec.velocity_of_mass_centre:
            return self._views["xpos"][:, 1, :2].clone()
        weighted = (self._body_mass[None, :, None] * self._views["xipos"]).sum(dim=1)
        return weighted[:, :2] / self._body_mass.sum()

    def _healthy(self) -> Tensor:
        low, high = self.spec.healthy_z_range
        z = self._views["qpos"][:, 2]
        if not self.spec.healthy_inclusive:
            return (z > low) & (z < high)
        finite = torch.isfinite(self._views["qpos"]).all(dim=1) & torch.isfinite(self._views["qvel"]).all(dim=1)
        return finite & (z >= low) & (z <= high)

    def _reward(self, x_velocity: Tensor, healthy: Tensor, ctrl: Tensor) -> Tensor:
        spec = self.spec
        forces = self._views["cfrc_ext"].reshape(self.num_envs, -1)
        if spec.contact_force_range is not None:
            forces = forces.clamp(*spec.contact_force_range)
        contact_cost = (spec.contact_cost_weight * forces.square().sum(dim=1)).clamp(max=spec.contact_cost_max)
        ctrl_cost = spec.ctrl_cost_weight * ctrl.square().sum(dim=1)
        return spec.forward_reward_weight * x_velocity + spec.healthy_reward * healthy - ctrl_cost - contact_cost

    def _reset_rows(self, done: Tensor, obs: Tensor) -> Tensor:
        """Rows in ``done`` start a new episode (state drawn as gymnasium's ``reset_model``);
        the others keep ``obs``."""
        spec, views = self.spec, self._views
        qpos = self._qpos0 + self._uniform(views["qpos"].shape, spec.reset_noise_scale)
        if spec.qvel_noise_normal:
            qvel = spec.reset_noise_scale * torch.randn(
                views["qvel"].shape, generator=self.generator, device=self.device
            )
        else:
            qvel = self._uniform(views["qvel"].shape, spec.reset_noise_scale)
        self._steps.masked_fill_(done, 0)
        return torch.where(done[:, None], self._write_state(done, qpos, qvel), obs)

    def _write_state(self, rows: Tensor, qpos: Tensor, qvel: Tensor) -> Tensor:
        """Rows ``rows`` take ``qpos``, ``qvel`` with zero controls, warm start and ``cfrc_ext``
        (gymnasium's ``mj_resetData`` then ``set_state``); one ``forward`` recomputes their
        kinematics. Returns the observation of every row after it."""
        views, mask = self._views, rows[:, None]
        views["qpos"].copy_(torch.where(mask, qpos, views["qpos"]))
        views["qvel"].copy_(torch.where(mask, qvel, views["qvel"]))
        for name in ("ctrl", "qacc_warmstart"):
            views[name].masked_fill_(mask, 0.0)
        views["time"].masked_fill_(rows, 0.0)
        views["cfrc_ext"].masked_fill_(rows[:, None, None], 0.0)
        self._launch("forward")
        self._xy = torch.where(mask, self._position(), self._xy)
        return self._observation()

    def _uniform(self, shape: torch.Size, scale: float) -> Tensor:
        return (2 * torch.rand(shape, generator=self.generator, device=self.device) - 1) * scale
