"""The GPU image path is refused at plan time unless the backend's switch is on: a path that has
not been checked on a GPU is never offered silently (docs/gpu.md, "Images")."""

from __future__ import annotations

import pytest

from gpuetl.api import Pipeline
from gpuetl.errors import SpecError
from gpuetl.sources.images import GPU_IMAGES_SWITCH
from imagedata import image_spec, photo_folder


class GpuPlanningStandIn:
    """What planning asks of a backend: its name, its regex checks (no RAPIDS needed)."""

    name = "gpu"
    images_on_gpu = False

    @property
    def runs_images(self):
        return self.images_on_gpu

    def check_regex(self, pattern):
        return None

    def regex_error(self, pattern):
        return None


def test_the_refusal_names_the_switch_and_how_to_set_it(tmp_path):
    photo_folder(tmp_path / "photos", n=2)
    with pytest.raises(SpecError) as caught:
        Pipeline.from_dict(image_spec(), base_dir=tmp_path).plan(GpuPlanningStandIn())
    text = str(caught.value) + " " + str(caught.value.hint)
    assert GPU_IMAGES_SWITCH in str(caught.value)
    assert f"b.{GPU_IMAGES_SWITCH} = True" in text and "--backend cpu" in text


def test_with_the_switch_on_the_plan_is_made(tmp_path):
    photo_folder(tmp_path / "photos", n=4)
    backend = GpuPlanningStandIn()
    backend.images_on_gpu = True
    plan = Pipeline.from_dict(image_spec(), base_dir=tmp_path).plan(backend)
    assert sum(len(p.ranges) for p in plan.partitions) == 4


def test_every_backend_and_planning_view_declares_the_switch_off():
    from gpuetl.backends import BACKENDS

    for entry in BACKENDS.values():
        assert entry.plan().images_on_gpu is False
    assert GPU_IMAGES_SWITCH == "images_on_gpu"
    assert BACKENDS["cpu"].plan().runs_images is True and BACKENDS["gpu"].plan().runs_images is False


def test_the_source_asks_the_backend_whether_it_runs_images_not_its_name(tmp_path):
    """The refusal follows the backend's capability (runs_images), whatever it is called: a third
    backend that runs images is planned, one named "cpu" that does not is refused."""
    photo_folder(tmp_path / "photos", n=2)
    pipeline = Pipeline.from_dict(image_spec(), base_dir=tmp_path)

    class Runs(GpuPlanningStandIn):
        name = "third"
        runs_images = True

    class DoesNot(GpuPlanningStandIn):
        name = "cpu"
        runs_images = False

    assert pipeline.plan(Runs()).partitions
    with pytest.raises(SpecError, match=GPU_IMAGES_SWITCH):
        pipeline.plan(DoesNot())


def test_the_cpu_backend_needs_no_switch(tmp_path):
    photo_folder(tmp_path / "photos", n=2)
    assert Pipeline.from_dict(image_spec(), base_dir=tmp_path).plan("cpu").partitions


def test_run_takes_a_backend_object(tmp_path):
    """Pipeline.run(backend=<object>) is how the switch reaches a run."""
    from gpuetl.backends import get_backend

    photo_folder(tmp_path / "photos", n=3)
    result = Pipeline.from_dict(image_spec(), base_dir=tmp_path).run(backend=get_backend("cpu"), scheduler="sync",
                                                                       report=False)
    assert result.counts["rows_out"] == 3
