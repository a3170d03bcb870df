"""smart_resize must equal qwen-vl-utils'; frames must map boxes exactly and reversibly."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qwen_vl_utils.vision_process import smart_resize as reference_smart_resize

from vlrl.vision import Frame, smart_resize

PIXEL_LIMITS = [(4 * 28 * 28, 16384 * 28 * 28), (3136, 12845056), (56 * 56, 224 * 224), (256 * 28 * 28, 1280 * 28 * 28)]


@pytest.mark.parametrize("min_pixels,max_pixels", PIXEL_LIMITS)
def test_smart_resize_equals_qwen_vl_utils_on_a_grid_of_sizes(min_pixels, max_pixels):
    sizes = [1, 13, 27, 28, 29, 55, 56, 100, 223, 224, 225, 427, 480, 640, 1000, 1080, 1920, 4000]
    for height, width in itertools.product(sizes, sizes):
        if max(height, width) / min(height, width) > 200:
            continue
        expected = reference_smart_resize(height, width, 28, min_pixels=min_pixels, max_pixels=max_pixels)
        assert smart_resize(height, width, 28, min_pixels, max_pixels) == expected, (height, width)


@settings(max_examples=400, deadline=None)
@given(
    height=st.integers(1, 8000),
    width=st.integers(1, 8000),
    limits=st.sampled_from(PIXEL_LIMITS),
    factor=st.sampled_from([28, 32]),
)
def test_smart_resize_equals_qwen_vl_utils_on_random_sizes(height, width, limits, factor):
    min_pixels, max_pixels = limits
    try:
        expected = reference_smart_resize(height, width, factor, min_pixels=min_pixels, max_pixels=max_pixels)
    except ValueError:
        with pytest.raises(ValueError):
            smart_resize(height, width, factor, min_pixels, max_pixels)
        return
    assert smart_resize(height, width, factor, min_pixels, max_pixels) == expected


def test_absolute_frame_uses_the_resized_image_size():
    frame = Frame.for_image("absolute", width=640, height=427, min_pixels=3136, max_pixels=12845056, factor=28)
    assert (frame.model_width, frame.model_height) == (644, 420)
    assert frame.box_to_model([100, 50, 320, 213.5]) == [101, 49, 322, 210]
    # VLM-R1 scales a predicted box back with x / input_width * image_width.
    assert frame.box_to_original([101, 49, 322, 210]) == [
        101 / 644 * 640,
        49 / 420 * 427,
        322 / 644 * 640,
        210 / 420 * 427,
    ]


def test_norm1000_frame_maps_to_thousandths_of_the_original_size():
    frame = Frame.for_image("norm1000", width=640, height=480, min_pixels=3136, max_pixels=12845056)
    assert frame.box_to_model([64, 48, 320, 240]) == [100, 100, 500, 500]
    assert frame.box_to_original([100, 100, 500, 500]) == [64.0, 48.0, 320.0, 240.0]


def test_original_frame_is_the_identity():
    frame = Frame.for_image("original", width=333, height=211, min_pixels=3136, max_pixels=12845056)
    box = [0.1, 7.3, 332.9, 210.0]
    assert frame.box_to_original(box) == box
    assert frame.point_to_original([5, 6]) == [5.0, 6.0]


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["absolute", "norm1000"]),
    width=st.integers(28, 3000),
    height=st.integers(28, 3000),
    fx=st.floats(0, 1),
    fy=st.floats(0, 1),
)
def test_a_point_survives_the_round_trip_through_the_model_frame(kind, width, height, fx, fy):
    frame = Frame.for_image(kind, width, height, 3136, 12845056, 28)
    x, y = fx * width, fy * height
    back = frame.point_to_original(frame.point_to_model([x, y], integer=False))
    assert back == pytest.approx([x, y], abs=1e-6)


def test_an_aspect_ratio_of_exactly_200_is_resized_as_qwen_vl_utils_does_and_201_refused_by_both():
    assert smart_resize(28, 5600, 28, 784, 10**8) == reference_smart_resize(28, 5600, 28, 784, 10**8)
    for resize in (smart_resize, reference_smart_resize):
        with pytest.raises(ValueError, match="aspect ratio"):
            resize(28, 5628, 28, 784, 10**8)


def test_transparent_pixels_are_put_over_white_as_qwen_vl_utils_does():
    from PIL import Image
    from qwen_vl_utils.vision_process import to_rgb as reference_to_rgb

    from vlrl.vision.images import to_rgb

    image = Image.new("RGBA", (2, 1), (255, 0, 0, 0))
    image.putpixel((1, 0), (0, 0, 255, 255))
    assert list(to_rgb(image).getdata()) == list(reference_to_rgb(image).getdata()) == [(255, 255, 255), (0, 0, 255)]


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P"])
def test_an_image_jpeg_encoded_is_what_lmms_evals_simple_classes_send_through_qwen_vl_utils(mode, tmp_path):
    """lmms-eval @75571cf, models/simple/qwen2_vl.py and qwen2_5_vl.py: `_encode_image_data_url`
    (media_encoder.py's encode_image_to_data_url: RGB where the image is not, JPEG at quality
    85), then qwen-vl-utils' fetch_image of that data URL within the class's pixel limits."""
    import base64
    import io

    import numpy as np
    from PIL import Image
    from qwen_vl_utils.vision_process import fetch_image

    from vlrl.vision.images import load_image

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (203, 317, 4), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGBA").convert(mode)
    image.save(tmp_path / "a.png")
    sent = image if image.mode == "RGB" else image.convert("RGB")  # encode_image_to_bytes, convert_rgb=True
    buffer = io.BytesIO()
    sent.save(buffer, format="JPEG", quality=85)
    url = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()
    expected = fetch_image({"image": url, "min_pixels": 3136, "max_pixels": 50176})
    ours = load_image(tmp_path / "a.png", 3136, 50176, 28, jpeg_quality=85)
    assert ours.size == expected.size and np.array_equal(np.asarray(ours), np.asarray(expected))
    plain = load_image(tmp_path / "a.png", 3136, 50176, 28)
    assert not np.array_equal(np.asarray(plain), np.asarray(expected))  # the encoding moves the pixels
    from vlrl.config import ModelConfig
    from vlrl.data.sample import Sample
    from vlrl.models.prompting import read_media

    model = ModelConfig(path="tiny:qwen2_5_vl", min_pixels=3136, max_pixels=50176, image_jpeg_quality=85)
    (rendered,) = read_media(
        Sample(id="a", task="t", problem="", solution="", images=[str(tmp_path / "a.png")]), model, {}
    )
    assert np.array_equal(np.asarray(rendered), np.asarray(expected))  # what a prompt is rendered from


def test_an_image_of_exactly_the_pixel_limit_opens_and_one_pixel_more_is_refused(tmp_path):
    from PIL import Image

    from vlrl.vision.images import ImageTooLarge, open_image

    Image.new("RGB", (10, 10)).save(tmp_path / "a.png")
    with open_image(tmp_path / "a.png", 100) as image:
        assert image.size == (10, 10)
    with pytest.raises(ImageTooLarge, match="has 10x10 pixels, more than the limit of 99"):
        open_image(tmp_path / "a.png", 99)


def test_a_frame_without_what_it_needs_is_refused_naming_it():
    with pytest.raises(ValueError, match="^the absolute frame needs the model's resize factor$"):
        Frame.for_image("absolute", width=640, height=480, min_pixels=3136, max_pixels=12845056)
    with pytest.raises(ValueError, match=r"^unknown frame kind 'pixels'; expected one of \('absolute', 'norm1000'"):
        Frame.for_image("pixels", width=640, height=480, min_pixels=3136, max_pixels=12845056, factor=28)


def test_frames_divide_first_as_vlm_r1_writes_it_to_the_last_bit():
    """x / width * model_width, not x * model_width / width: at x = 7 on a 640 x 427 image the two
    differ in the last bit (7.043749999999999 against 7.04375)."""
    frame = Frame.for_image("absolute", width=640, height=427, min_pixels=3136, max_pixels=12845056, factor=28)
    assert frame.box_to_model([7, 7, 1, 1], integer=False) == [
        7 / 640 * 644,
        7 / 427 * 420,
        1 / 640 * 644,
        1 / 427 * 420,
    ]
    assert frame.box_to_original([7, 1, 1, 7]) == [7 / 644 * 640, 1 / 420 * 427, 1 / 644 * 640, 7 / 420 * 427]


def test_where_the_model_sees_the_image_at_its_size_a_conversion_is_exactly_the_identity():
    """100 / 728 * 728 is 100.00000000000001: a 728 x 728 image is its own absolute frame, and a
    box edge at 100 stays at 100 both ways (GUI-R1 compares in the model's frame)."""
    frame = Frame.for_image("absolute", width=728, height=728, min_pixels=3136, max_pixels=12845056, factor=28)
    assert (frame.model_width, frame.model_height) == (728, 728) and 100 / 728 * 728 != 100
    assert frame.box_to_model([100, 100, 100, 100], integer=False) == [100.0] * 4
    assert frame.box_to_original([100, 100, 100, 100]) == [100.0] * 4
    assert frame.point_to_model([100, 100], integer=False) == frame.point_to_original([100, 100]) == [100.0, 100.0]


def test_points_go_to_the_model_frame_as_whole_numbers_unless_asked_otherwise():
    frame = Frame.for_image("norm1000", width=640, height=480, min_pixels=3136, max_pixels=12845056)
    assert frame.point_to_model([64.3, 48]) == [100, 100]
    assert frame.point_to_model([64.3, 48], integer=False) == [64.3 / 640 * 1000, 100.0]


def test_an_image_over_pils_warning_size_but_under_the_limit_opens_without_a_warning(tmp_path, monkeypatch):
    import warnings

    from PIL import Image

    from vlrl.vision.images import open_image

    Image.new("RGB", (10, 10)).save(tmp_path / "a.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 60)  # 100 pixels: PIL warns, and refuses above 120
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_image(tmp_path / "a.png", 100) as image:
            assert image.size == (10, 10)
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]


def test_an_image_over_pils_refusal_is_refused_as_too_large_naming_it(tmp_path, monkeypatch):
    from PIL import Image

    from vlrl.vision.images import ImageTooLarge, open_image

    Image.new("RGB", (10, 10)).save(tmp_path / "a.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 40)  # PIL refuses above 80
    with pytest.raises(ImageTooLarge, match=f"^image {tmp_path / 'a.png'} is over PIL's decompression-bomb limit"):
        open_image(tmp_path / "a.png", 1000)
    with pytest.raises(ImageTooLarge, match="^the first image is over PIL's decompression-bomb limit"):
        open_image(tmp_path / "a.png", 1000, name="the first image")


def test_a_loaded_image_is_resized_bicubic_as_qwen_vl_utils_fetch_image_does(tmp_path):
    import numpy as np
    from PIL import Image
    from qwen_vl_utils.vision_process import fetch_image

    from vlrl.vision.images import load_image

    pixels = np.random.default_rng(0).integers(0, 256, (90, 130, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a.png")
    ours = load_image(tmp_path / "a.png", 3136, 56 * 56 * 2, 28)
    theirs = fetch_image({"image": str(tmp_path / "a.png"), "min_pixels": 3136, "max_pixels": 56 * 56 * 2}, 14)
    assert ours.size == theirs.size != (130, 90)
    assert np.array_equal(np.asarray(ours), np.asarray(theirs))


def test_sizes_smart_resize_cannot_meet_are_refused_saying_why():
    with pytest.raises(ValueError, match=r"^max_pixels \(4000\) must be >= min_pixels \(5000\)$"):
        smart_resize(100, 100, 28, 5000, 4000)
    for height, width in ((0, 100), (100, -1)):
        with pytest.raises(ValueError, match="^image size must be positive"):
            smart_resize(height, width, 28, 3136, 12845056)


def test_an_image_too_thin_for_max_pixels_is_refused_saying_so_where_qwen_vl_utils_hands_pil_a_zero_side(tmp_path):
    from PIL import Image
    from qwen_vl_utils.vision_process import fetch_image

    from vlrl.vision.images import load_image

    assert smart_resize(30, 5000, 28, 3136, 3136) == reference_smart_resize(30, 5000, 28, 3136, 3136) == (0, 700)
    Image.new("RGB", (5000, 30)).save(tmp_path / "thin.png")
    with pytest.raises(ValueError, match="must be > 0"):  # PIL's refusal, in qwen-vl-utils
        fetch_image({"image": str(tmp_path / "thin.png"), "min_pixels": 3136, "max_pixels": 3136}, 14)
    message = r"^a 5000x30 image resizes to 700x0 under max_pixels 3136 \(smart_resize, as qwen-vl-utils\): too thin"
    with pytest.raises(ValueError, match=message):
        load_image(tmp_path / "thin.png", 3136, 3136, 28)
    with pytest.raises(ValueError, match=message):
        Frame.for_image("absolute", 5000, 30, 3136, 3136, 28)
    assert Frame.for_image("absolute", 5000, 56, 3136, 200000, 28).model_height == 28  # thin, yet a row of patches


def test_a_loaded_image_is_limited_by_pils_refusal_not_by_the_datas_pixel_limit(tmp_path, monkeypatch):
    """The data's limit (data.max_image_pixels) was checked when the record was read; load_image
    applies only PIL's own refusal (PIL_REFUSES_ABOVE), which a data limit may go up to."""
    from PIL import Image

    from vlrl.vision import images

    Image.new("RGB", (10, 10)).save(tmp_path / "a.png")
    monkeypatch.setattr(images, "PIL_REFUSES_ABOVE", 99)
    with pytest.raises(images.ImageTooLarge, match="has 10x10 pixels, more than the limit of 99$"):
        images.load_image(tmp_path / "a.png", 4, 10_000, 2)
    monkeypatch.setattr(images, "PIL_REFUSES_ABOVE", 100)
    assert images.load_image(tmp_path / "a.png", 4, 10_000, 2).size == (10, 10)
