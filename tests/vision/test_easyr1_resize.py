"""model.image_resize=easyr1: images sized as EasyR1, GUI-R1 and SophiaVL-R1 size them, its
`process_image` first and its processor's smart_resize after, so that the model sees the image
those recipes trained on (its size, and so its number of image tokens)."""

from __future__ import annotations

import math
import random

from PIL import Image
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as processor_smart_resize

from vlrl.config import ModelConfig
from vlrl.models.loading import frame_spec
from vlrl.vision.images import load_image
from vlrl.vision.resize import easyr1_size, model_size

QWEN25_PROCESSOR = (3136, 12845056)  # Qwen2.5-VL-3B-Instruct's preprocessor_config.json


class SizeOnly:
    """What EasyR1's process_image reads and calls of a PIL image, without its pixels."""

    def __init__(self, width: int, height: int):
        self.width, self.height, self.mode = width, height, "RGB"

    def resize(self, size):
        return SizeOnly(*size)


def process_image(image, max_pixels, min_pixels):
    """EasyR1's process_image, transcribed from ritzz-ai/GUI-R1 d43eea2 verl/utils/dataset.py
    (hiyouga/EasyR1 b44b311 computes the same sizes); the file reading and RGB conversion left out."""
    if (image.width * image.height) > max_pixels:
        resize_factor = math.sqrt(max_pixels / (image.width * image.height))
        width, height = int(image.width * resize_factor), int(image.height * resize_factor)
        image = image.resize((width, height))

    if (image.width * image.height) < min_pixels:
        resize_factor = math.sqrt(min_pixels / (image.width * image.height))
        width, height = int(image.width * resize_factor), int(image.height * resize_factor)
        image = image.resize((width, height))
    return image


def test_the_first_resize_is_easyr1s_process_image_and_the_second_its_processors():
    rng = random.Random(0)
    limits = [(262144, 1258291), (262144, 4194304), (3136, 12845056), (200704, 401408)]
    for _ in range(20000):
        width, height = rng.randint(40, 6000), rng.randint(40, 6000)
        if max(width, height) / min(width, height) > 150:
            continue
        min_pixels, max_pixels = rng.choice(limits)
        expected = process_image(SizeOnly(width, height), max_pixels, min_pixels)
        assert easyr1_size(height, width, min_pixels, max_pixels) == (expected.height, expected.width)
        final = processor_smart_resize(expected.height, expected.width, 28, *QWEN25_PROCESSOR)
        assert model_size(height, width, 28, min_pixels, max_pixels, QWEN25_PROCESSOR) == final, (width, height)


def test_a_gui_r1_screenshot_is_the_size_gui_r1s_model_sees():
    """1080 x 2400 under GUI-R1's 262144..1258291: 752 x 1672 after process_image, 756 x 1680
    after the processor (1,620 image tokens); one smart_resize makes it 728 x 1652."""
    model = ModelConfig(path="tiny:qwen2_5_vl", min_pixels=262144, max_pixels=1258291)
    frame = frame_spec(ModelConfig(**{**model.__dict__, "image_resize": "easyr1"})).frame(1080, 2400)
    assert (frame.model_width, frame.model_height) == (756, 1680)
    smart = frame_spec(model).frame(1080, 2400)
    assert (smart.model_width, smart.model_height) == (728, 1652)
    qwen3 = frame_spec(ModelConfig(path="tiny:qwen3_vl", min_pixels=262144, max_pixels=1258291, image_resize="easyr1"))
    assert qwen3.then_within == (65536, 16777216)


def test_a_loaded_image_is_resized_twice_as_easyr1_resizes_it_and_lands_on_its_frame(tmp_path):
    rng = random.Random(1)
    image = Image.new("RGB", (300, 500))
    image.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(300 * 500)])
    image.save(tmp_path / "im.png")
    loaded = load_image(tmp_path / "im.png", 262144, 1258291, 28, then_within=QWEN25_PROCESSOR)
    first = process_image(image, 1258291, 262144)  # the real image through the transcription: PIL's default filter
    height, width = processor_smart_resize(first.height, first.width, 28, *QWEN25_PROCESSOR)
    assert loaded.size == (width, height) == (392, 672)
    assert loaded.tobytes() == first.resize((width, height), Image.Resampling.BICUBIC).tobytes()
    model = ModelConfig(path="tiny:qwen2_5_vl", min_pixels=262144, max_pixels=1258291, image_resize="easyr1")
    frame = frame_spec(model).frame(300, 500)
    assert (frame.model_width, frame.model_height) == loaded.size


def easyr1_process_image(path, min_pixels, max_pixels):
    """hiyouga/EasyR1 b44b311 verl/utils/dataset.py process_image, whole (GUI-R1 d43eea2's is the
    same): the image resized in the file's own mode, then converted to RGB."""
    image = Image.open(path)
    image.load()  # avoid "Too many open files" errors
    if max_pixels is not None and (image.width * image.height) > max_pixels:
        resize_factor = math.sqrt(max_pixels / (image.width * image.height))
        width, height = int(image.width * resize_factor), int(image.height * resize_factor)
        image = image.resize((width, height))

    if min_pixels is not None and (image.width * image.height) < min_pixels:
        resize_factor = math.sqrt(min_pixels / (image.width * image.height))
        width, height = int(image.width * resize_factor), int(image.height * resize_factor)
        image = image.resize((width, height))

    if image.mode != "RGB":
        image = image.convert("RGB")

    return image


def test_a_transparent_palette_or_gray_image_is_easyr1s_alpha_dropped_after_its_resize(tmp_path):
    """EasyR1 resizes an image in its own mode and then converts it (the alpha dropped: a fully
    transparent pixel keeps its color), where qwen-vl-utils paints transparency over white."""
    rng = random.Random(2)
    rgba = Image.new("RGBA", (300, 200))
    rgba.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256), rng.choice((0, 90, 255)))
                  for _ in range(300 * 200)])  # fmt: skip
    images = {
        "rgba.png": rgba,
        "palette.png": rgba.convert("RGB").quantize(64),
        "gray_alpha.png": rgba.convert("LA"),
        "big_rgba.png": rgba.resize((1800, 1200)),  # over max_pixels: resized down first
    }
    for name, image in images.items():
        image.save(tmp_path / name)
        loaded = load_image(tmp_path / name, 262144, 1258291, 28, then_within=QWEN25_PROCESSOR)
        first = easyr1_process_image(tmp_path / name, 262144, 1258291)
        height, width = processor_smart_resize(first.height, first.width, 28, *QWEN25_PROCESSOR)
        assert loaded.tobytes() == first.resize((width, height), Image.Resampling.BICUBIC).tobytes(), name
    clear = tmp_path / "clear.png"
    Image.new("RGBA", (560, 560), (10, 20, 30, 0)).save(clear)
    assert load_image(clear, 262144, 1258291, 28, then_within=QWEN25_PROCESSOR).getpixel((5, 5)) == (10, 20, 30)
    assert load_image(clear, 262144, 1258291, 28).getpixel((5, 5)) == (255, 255, 255)  # qwen-vl-utils' rule


def test_a_prompt_keeps_the_easyr1_size_through_the_processor(tmp_path, tiny_qwen25):
    """The processor is handed limits that hold the image (`covering`): it keeps its size even
    where that lies outside model.min_pixels..max_pixels (check_sizes raises otherwise)."""
    from transformers import AutoProcessor

    from vlrl.data.sample import Sample
    from vlrl.models.prompting import render_prompts

    Image.new("RGB", (1080, 2400), (90, 120, 150)).save(tmp_path / "shot.png")
    model = ModelConfig(path=str(tiny_qwen25), min_pixels=262144, max_pixels=1258291, image_resize="easyr1")
    frame = frame_spec(model).frame(1080, 2400)
    sample = Sample(id="0", task="t", problem="", solution=None, images=[str(tmp_path / "shot.png")], frame=frame)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "where?"}]}]
    (prompt,) = render_prompts(AutoProcessor.from_pretrained(tiny_qwen25), [(messages, sample)], model)
    assert model.max_pixels < 756 * 1680  # outside the limits it was first scaled into
    assert prompt.vision["image_grid_thw"].tolist() == [[1, 1680 // 14, 756 // 14]]
