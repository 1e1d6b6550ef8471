"""The vocabulary of the training schemas: domains, each a place table, an item table and an event table.

Every domain names its tables, columns, enum values and the nouns its questions use, in English and
Korean. None of the table names may be one of the shipped evaluation set's (``train_data`` checks it),
so the adapter learns to read a DDL it has never seen rather than to remember the eval databases.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Noun:
    table: str
    key: str  # the primary key column (also the foreign key's name in the child table)
    en: str  # singular
    en_pl: str
    ko: str


@dataclass(frozen=True)
class Column:
    name: str
    en: str
    ko: str
    values: tuple = ()  # enum values for a category column; (low, high) for a number column
    unit_en: str = ""
    unit_ko: str = ""


@dataclass(frozen=True)
class Domain:
    name: str
    place: Noun  # e.g. clinics: id, name, city, one number
    place_num: Column
    item: Noun  # e.g. patients: id, name, place FK, category, number, date, status
    item_cat: Column
    item_num: Column
    item_date: Column
    item_status: Column
    event: Noun  # e.g. treatments: id, item FK, date, amount, kind
    event_num: Column
    event_date: Column
    event_kind: Column
    person_items: bool = True  # item names are people's names (else words from item_words)
    item_words: tuple[str, ...] = ()


def _c(name, en, ko, values=(), unit_en="", unit_ko=""):
    return Column(name, en, ko, tuple(values), unit_en, unit_ko)


DOMAINS: tuple[Domain, ...] = (
    Domain("hospital", Noun("clinics", "clinic_id", "clinic", "clinics", "병원"),
           _c("beds", "beds", "병상 수", (20, 400)),
           Noun("patients", "patient_id", "patient", "patients", "환자"),
           _c("blood_type", "blood type", "혈액형", ("A", "B", "O", "AB")), _c("age", "age", "나이", (3, 92), "", "세"),
           _c("admitted_on", "admission date", "입원일"),
           _c("state", "state", "상태", ("admitted", "discharged", "transferred")),
           Noun("treatments", "treatment_id", "treatment", "treatments", "치료"),
           _c("cost", "cost", "비용", (10000, 900000), "KRW", "원"), _c("treated_on", "treatment date", "치료일"),
           _c("kind", "kind", "종류", ("surgery", "therapy", "checkup", "vaccine"))),
    Domain("gym", Noun("gyms", "gym_id", "gym", "gyms", "헬스장"),
           _c("area_m2", "floor area", "면적", (80, 900), "m2", "제곱미터"),
           Noun("trainees", "trainee_id", "trainee", "trainees", "회원"),
           _c("plan", "plan", "요금제", ("monthly", "quarterly", "yearly")),
           _c("weight_kg", "weight", "체중", (45, 120), "kg", "kg"),
           _c("joined_on", "join date", "가입일"), _c("status", "status", "상태", ("active", "paused", "expired")),
           Noun("workouts", "workout_id", "workout", "workouts", "운동 기록"),
           _c("minutes", "minutes", "운동 시간", (10, 150), "minutes", "분"),
           _c("done_on", "workout date", "운동 날짜"),
           _c("exercise", "exercise", "운동 종류", ("running", "cycling", "yoga", "swimming", "weights"))),
    Domain("farm", Noun("farms", "farm_id", "farm", "farms", "농장"),
           _c("hectares", "size", "면적", (2, 120), "ha", "헥타르"),
           Noun("fields", "field_id", "field", "fields", "밭"),
           _c("crop", "crop", "작물", ("rice", "corn", "wheat", "potato", "cabbage")),
           _c("size_a", "area", "넓이", (1, 60), "acres", "에이커"),
           _c("planted_on", "planting date", "파종일"), _c("soil", "soil", "토양", ("clay", "sand", "loam")),
           Noun("yields", "yield_id", "yield record", "yield records", "수확 기록"),
           _c("tons", "tons", "수확량", (1, 90), "t", "톤"), _c("harvested_on", "harvest date", "수확일"),
           _c("quality", "quality grade", "품질 등급", ("A", "B", "C"))),
    Domain("hotel", Noun("hotels", "hotel_id", "hotel", "hotels", "호텔"),
           _c("stars", "star rating", "성급", (1, 5), "stars", "성"),
           Noun("guests", "guest_id", "guest", "guests", "투숙객"),
           _c("nationality", "nationality", "국적", ("KR", "JP", "US", "DE", "FR")),
           _c("age", "age", "나이", (19, 80), "", "세"),
           _c("registered_on", "registration date", "등록일"),
           _c("level", "membership level", "멤버십 등급", ("bronze", "platinum", "diamond")),
           Noun("stays", "stay_id", "stay", "stays", "숙박"),
           _c("nights", "nights", "숙박 일수", (1, 14), "nights", "박"), _c("check_in", "check-in date", "체크인 날짜"),
           _c("room_type", "room type", "객실 종류", ("single", "double", "suite"))),
    Domain("airline", Noun("airports", "airport_id", "airport", "airports", "공항"),
           _c("gates", "gates", "게이트 수", (4, 120)),
           Noun("pilots", "pilot_id", "pilot", "pilots", "조종사"),
           _c("rank", "rank", "직급", ("captain", "first_officer", "trainee")),
           _c("flight_hours", "flight hours", "비행 시간", (200, 20000), "hours", "시간"),
           _c("licensed_on", "license date", "면허 취득일"),
           _c("duty", "duty status", "근무 상태", ("on_duty", "on_leave", "retired")),
           Noun("flights", "flight_id", "flight", "flights", "비행"),
           _c("passengers", "passengers", "승객 수", (40, 400)), _c("departed_on", "departure date", "출발일"),
           _c("aircraft", "aircraft", "기종", ("A320", "B737", "B777", "A350"))),
    Domain("museum", Noun("museums", "museum_id", "museum", "museums", "박물관"),
           _c("floors", "floors", "층수", (1, 8)),
           Noun("artworks", "artwork_id", "artwork", "artworks", "작품"),
           _c("medium", "medium", "재료", ("oil", "watercolor", "bronze", "marble", "photo")),
           _c("value_usd", "value", "가치", (1000, 900000), "USD", "달러"),
           _c("acquired_on", "acquisition date", "취득일"),
           _c("display", "display status", "전시 상태", ("on_view", "in_storage", "on_loan")),
           Noun("visits", "visit_id", "visit record", "visit records", "관람 기록"),
           _c("visitors", "visitors", "관람객 수", (5, 900)), _c("visited_on", "visit date", "관람일"),
           _c("ticket", "ticket type", "티켓 종류", ("adult", "child", "senior"))),
    Domain("cinema", Noun("theaters", "theater_id", "theater", "theaters", "극장"),
           _c("screens", "screens", "상영관 수", (1, 16)),
           Noun("movies", "movie_id", "movie", "movies", "영화"),
           _c("genre", "genre", "장르", ("drama", "comedy", "action", "horror", "animation")),
           _c("runtime_min", "runtime", "상영 시간", (80, 190), "minutes", "분"),
           _c("released_on", "release date", "개봉일"),
           _c("rating", "age rating", "관람 등급", ("all", "12", "15", "18")),
           Noun("screenings", "screening_id", "screening", "screenings", "상영"),
           _c("tickets_sold", "tickets sold", "판매 티켓 수", (0, 300)), _c("shown_on", "screening date", "상영일"),
           _c("format", "format", "상영 방식", ("2D", "3D", "IMAX"))),
    Domain("bank", Noun("banks", "bank_id", "bank branch", "bank branches", "은행 지점"),
           _c("tellers", "tellers", "창구 수", (2, 20)),
           Noun("accounts", "account_id", "account", "accounts", "계좌"),
           _c("account_type", "account type", "계좌 종류", ("checking", "savings", "loan")),
           _c("balance", "balance", "잔액", (0, 90000000), "KRW", "원"),
           _c("opened_on", "opening date", "개설일"), _c("state", "state", "상태", ("open", "frozen", "closed")),
           Noun("transfers", "transfer_id", "transfer", "transfers", "이체"),
           _c("amount", "amount", "금액", (1000, 5000000), "KRW", "원"), _c("sent_on", "transfer date", "이체일"),
           _c("channel", "channel", "채널", ("app", "web", "atm", "counter")), person_items=False,
           item_words=("ACC", "SAV", "DEP", "FIX", "CHK", "INV")),
    Domain("restaurant", Noun("kitchens", "kitchen_id", "restaurant", "restaurants", "식당"),
           _c("seats", "seats", "좌석 수", (10, 200)),
           Noun("dishes", "dish_id", "dish", "dishes", "메뉴"),
           _c("cuisine", "cuisine", "요리 종류", ("korean", "italian", "chinese", "japanese")),
           _c("price", "price", "가격", (5000, 60000), "KRW", "원"),
           _c("added_on", "date added", "등록일"), _c("spicy", "spiciness", "맵기", ("mild", "medium", "hot")),
           Noun("sales", "sale_id", "sale", "sales", "판매"),
           _c("qty", "quantity", "수량", (1, 30)), _c("sold_on", "sale date", "판매일"),
           _c("payment", "payment method", "결제 수단", ("card", "cash", "mobile")), person_items=False,
           item_words=("비빔밥", "김치찌개", "Pasta", "Ramen", "Sushi", "불고기", "Pizza", "Dumplings", "냉면", "Tacos",
                       "떡볶이", "Risotto", "Udon", "갈비탕", "Curry")),
    Domain("garage", Noun("workshops", "workshop_id", "workshop", "workshops", "정비소"),
           _c("lifts", "lifts", "리프트 수", (1, 12)),
           Noun("vehicles", "vehicle_id", "vehicle", "vehicles", "차량"),
           _c("fuel", "fuel type", "연료", ("gasoline", "diesel", "electric", "hybrid")),
           _c("mileage_km", "mileage", "주행 거리", (1000, 300000), "km", "km"),
           _c("registered_on", "registration date", "등록일"),
           _c("condition", "condition", "상태", ("good", "fair", "poor")),
           Noun("repairs", "repair_id", "repair", "repairs", "수리"),
           _c("labor_cost", "labor cost", "공임", (20000, 2000000), "KRW", "원"),
           _c("repaired_on", "repair date", "수리일"),
           _c("part", "part", "부품", ("brakes", "engine", "tires", "battery")), person_items=False,
           item_words=("Sonata", "Avante", "Model3", "Corolla", "Golf", "K5", "Tucson", "Civic", "Ioniq", "Spark")),
    Domain("zoo", Noun("zoos", "zoo_id", "zoo", "zoos", "동물원"),
           _c("acres", "size", "면적", (10, 300), "acres", "에이커"),
           Noun("animals", "animal_id", "animal", "animals", "동물"),
           _c("species", "species", "종", ("lion", "panda", "penguin", "giraffe", "otter")),
           _c("weight_kg", "weight", "몸무게", (2, 900), "kg", "kg"),
           _c("arrived_on", "arrival date", "입소일"),
           _c("health", "health status", "건강 상태", ("healthy", "sick", "recovering")),
           Noun("feedings", "feeding_id", "feeding", "feedings", "급식 기록"),
           _c("food_kg", "food amount", "먹이 양", (1, 40), "kg", "kg"), _c("fed_on", "feeding date", "급식일"),
           _c("diet", "diet", "먹이 종류", ("meat", "fish", "bamboo", "hay")), person_items=False,
           item_words=("Leo", "Bao", "Pingu", "Tall", "Momo", "Nala", "Coco", "Rio", "Kiki", "Toto", "봄이", "푸바오")),
    Domain("concert", Noun("venues", "venue_id", "venue", "venues", "공연장"),
           _c("capacity", "capacity", "수용 인원", (100, 20000)),
           Noun("artists", "artist_id", "artist", "artists", "가수"),
           _c("genre", "genre", "장르", ("pop", "rock", "jazz", "hiphop", "classical")),
           _c("fans", "fans", "팬 수", (100, 900000)),
           _c("debuted_on", "debut date", "데뷔일"), _c("label", "label type", "소속 형태", ("major", "indie", "self")),
           Noun("gigs", "gig_id", "concert", "concerts", "공연"),
           _c("audience", "audience", "관객 수", (50, 20000)), _c("played_on", "concert date", "공연일"),
           _c("tour", "tour leg", "투어 구간", ("asia", "europe", "america"))),
)
